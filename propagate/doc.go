// Package propagate carries a request's deadline on the wire, so that every hop of a
// service chain works to the same clock: when the first caller gives up, the last hop
// stops too.
//
// On a server, [NewMiddleware] or the server interceptors read the caller's budget
// (grpc-timeout; Connect-Timeout-Ms; Envoy's header when trusted), clamp it, and set it
// as the deadline of the request's context. On a client, [NewTransport] or the client
// interceptors, innermost beneath retry and hedge, send the budget left at the moment
// each attempt goes out, less a reserve for the caller's own work:
//
//	server: otelhttp/otelgrpc → propagate → shortcircuit → handler
//	client: otelhttp/otelgrpc → retry → hedge → propagate → transport
//
// A unary request that came without a deadline gets a default budget (30 s), and an
// inbound budget is clamped to a maximum (5 minutes). A stream gets neither: gRPC and
// connect streaming calls, and HTTP requests to the routes the server declared
// streaming ([WithStreamingHTTP], [StreamingRoutes]: server-sent events, WebSocket,
// long downloads), keep their caller's deadline or none, since a caller can hold a
// stream open without any deadline, and a stream cut at a timeout it never asked for
// is the bug, not the guard; [WithMaxStreamTimeout] bounds every stream's life when
// the server wants a bound.
//
// What the server serves decides what is a stream, never what a request claims: by
// default no HTTP request is one, and Accept: text/event-stream, an Upgrade header
// or a Connect streaming content type on a route the server did not declare leave
// the request its default budget and its clamp. A gRPC or connect call is a stream
// when the procedure it reaches is one, which only the handler's framework knows:
// the gRPC interceptors and connectkit's decide there.
//
// The request's level (package criticality: critical_plus, critical,
// sheddable_plus, sheddable) travels the same way, in deadlinekit-criticality
// ([HeaderCriticality], the same name as gRPC metadata): the client side writes
// the level of the context each attempt is sent under, nothing for the default
// (critical, which an absent header means); the server side reads it from the
// callers it trusts ([WithTrustHTTP], [WithTrustGRPC], the rule of the deadline
// headers) and puts it on the context for the handler and every call it makes. An
// untrusted caller's is ignored and removed, so that it cannot promote itself.
//
// The headers this package reads and writes:
//
//	grpc-timeout                    out and in (HTTP; gRPC and connect: the framework's own)
//	Connect-Timeout-Ms              in; out with WithConnectTimeoutHeader (connect: its own)
//	X-Envoy-Expected-Rq-Timeout-Ms  in, with WithTrustEnvoy
//	deadlinekit-criticality         out; in from trusted callers (HTTP, gRPC, connect)
//
// Inbound deadline headers are untrusted input: malformed ones are refused with a
// clear error, and a request that arrives with no time left is answered at once with
// "do not retry". With an OTel SDK installed, the budgets received and sent are
// recorded on the spans (the keys are in package otelattr).
package propagate
