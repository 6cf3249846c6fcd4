// Package propagate carries a request's deadline on the wire, so that every hop of a
// service chain works to the same clock: when the first caller gives up, the last hop
// stops too.
//
// # Where it sits
//
// On a server, the middleware or interceptor of this package runs right after the
// user's tracing and before package shortcircuit and the handler: it reads the caller's
// budget from the request, clamps it, and sets it as the deadline of the request's
// context. On a client, it is the innermost layer, beneath retry and hedge: it writes
// the budget left at the moment each attempt is sent.
//
//	server: otelhttp/otelgrpc → propagate → shortcircuit → handler
//	client: otelhttp/otelgrpc → retry → hedge → propagate → transport
//
// # Wire format
//
// The budget travels as grpc-timeout, on gRPC (grpc-go writes it from the context's
// deadline) and on HTTP (this package writes it): 1 to 8 digits and a unit
// ([EncodeGRPCTimeout], [DecodeGRPCTimeout]). Outbound values are rounded down, so no
// hop is handed time it does not have. Servers also understand Connect-Timeout-Ms
// (Connect protocol, milliseconds), and X-Envoy-Expected-Rq-Timeout-Ms when the proxy
// in front is trusted ([WithTrustEnvoy]). The HTTP client sends Connect-Timeout-Ms on
// request ([WithConnectTimeoutHeader]).
//
// # Client side
//
// [NewTransport], [UnaryClientInterceptor] and [StreamClientInterceptor] pass the time
// left unchanged by default. [WithReserve] and [WithReserveFraction] keep time back
// for the caller's own work after the answer, [WithMaxPerHop] caps what one hop may be
// given, and [WithFloor] refuses to send a call whose budget is too small to be of use.
// A call with nothing left fails at once with an error that matches
// context.DeadlineExceeded and deadline.ErrInsufficientBudget (gRPC: DeadlineExceeded),
// without being sent; package retry above does not retry it. When the options shorten
// a stream's deadline, the derived context is released as soon as the stream ends,
// including a client-streaming call whose answer was received.
//
// # Server side
//
// [NewMiddleware], [UnaryServerInterceptor] and [StreamServerInterceptor] treat the
// inbound budget as untrusted input: it is clamped to [WithMaxTimeout] (default 5
// minutes), a default budget applies when none came ([WithDefaultTimeout], default
// 30 s), a malformed header is answered with HTTP 400 or gRPC InvalidArgument naming
// the header (unless [WithIgnoreMalformed]), and a request that arrives with no time
// left is answered with HTTP 504 or gRPC DeadlineExceeded without running the handler,
// with grpc-retry-pushback-ms: -1 (an HTTP header, a gRPC trailer), so that no retry
// layer retries it, deadlinekit's nor grpc-go's own retry policy: a retry could only
// arrive with less time. The handler reads what was applied with [InboundFromContext].
//
// # Traces
//
// With an OTel SDK installed, the server records the budget it applied, its source
// and whether it was clamped on the server span, and the client records the budget it
// sent on the client (or attempt) span; see package otelattr for the keys. Without an
// SDK this costs nothing.
//
// # Errors on the wire
//
//	condition                      gRPC               HTTP
//	no time left, below the floor  DeadlineExceeded   504
//	malformed deadline header      InvalidArgument    400
//
// On gRPC, a malformed grpc-timeout never reaches an interceptor: grpc-go rejects it
// itself (with code Internal) and keeps the last of repeated values. InvalidArgument is
// the answer to a malformed Envoy header, which the interceptors parse themselves.
package propagate
