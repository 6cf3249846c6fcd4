package connectkit

import (
	"connectrpc.com/connect"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/rpc"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// ClientOption returns the client side of the stack for a connect client, in the
// order of [deadlinekit.DialOptions], outermost first: [Retry] → [Breaker] →
// [Hedge] → [Propagate], configured by the stack's options as DialOptions is. One
// option is one client: the clients given it share one retry budget, one set of
// circuits and one [hedge.Hedger]. Put the user's tracing (otelconnect) before it in
// connect.WithInterceptors, so that its client span is the call's span.
func ClientOption(opts ...deadlinekit.Option) connect.ClientOption {
	layers := rpc.Lookup[func([]deadlinekit.Option) []rpc.Layer]("deadlinekit.client")(opts)
	is := make([]connect.Interceptor, len(layers))
	for i, l := range layers {
		is[i] = &interceptor{client: l.Client, stream: l.Stream, admit: l.StreamAdmit, resends: l.Resends, stamps: l.Stamps}
	}
	return connect.WithInterceptors(is...)
}

// HandlerOption returns the server side of the stack for a connect handler, in the
// order of [deadlinekit.ServerOptions], outermost first: [Propagate] → [Retry]'s
// server side (the one-layer rule) → [ShortCircuit] → dedup, with
// [deadlinekit.WithDedup], configured by the stack's options as ServerOptions is.
// Put the user's tracing (otelconnect) before it.
//
// Dedup reads the Idempotency-Key header (in the gRPC protocols, the
// idempotency-key metadata is the same header) of unary calls, stores what the
// first caller received, and answers repeats with it as package dedup's gRPC
// interceptor does; streams go through. What is stored is the response message,
// or the handler's error as connect-go sent it (the code, message and details of
// the *connect.Error in its chain; else Canceled or DeadlineExceeded for a context
// error, Unknown with the error's text for anything else, a grpc-go status error
// included), and the header and trailer metadata where the caller received them:
// what the handler set through connect.CallInfoForHandlerContext, what it set on
// the response, and an error's own metadata (connect-go sends it in the header in
// the Connect protocol, in the trailer in gRPC and gRPC-Web, and not at all for an
// error a connect client returned). A repeat gets Idempotent-Replayed: true in its
// header. Neither the response nor the error is changed. A handler's
// *connect.Response[T] cannot be named by an interceptor: its type is learned from
// the first response to each procedure on this server, so a server that has not yet
// answered a procedure once answers a replay of it Unavailable with a pushback (the
// caller's retry layer comes back) rather than the stored message.
func HandlerOption(opts ...deadlinekit.Option) connect.HandlerOption {
	layers := rpc.Lookup[func([]deadlinekit.Option) []rpc.Layer]("deadlinekit.server")(opts)
	is := make([]connect.Interceptor, len(layers))
	for i, l := range layers {
		is[i] = &interceptor{server: l.Server}
	}
	return connect.WithInterceptors(is...)
}

// Propagate returns the deadline layer (package propagate). On a client, it derives
// each call's and each stream's context from the caller's by the options (reserve,
// per-hop cap, floor, default), and connect-go writes the result on the wire; a call
// with less than the floor left fails with CodeDeadlineExceeded, unsent. On a
// handler, it applies the server's rules to the deadline connect-go read (the clamp,
// the default budget, Envoy's header when trusted: [propagate.WithTrustGRPC] decides
// per call, from its context; a streaming handler gets no default budget and no
// clamp, only [propagate.WithMaxStreamTimeout]) and refuses a request that arrived with no time left
// with CodeDeadlineExceeded and grpc-retry-pushback-ms: -1. The request's level
// (package criticality) travels with it as package propagate carries it: every
// call and stream sends its context's level in deadlinekit-criticality (nothing
// for the default, critical), and a handler puts a trusted caller's on its
// context.
func Propagate(opts ...propagate.Option) connect.Interceptor {
	return layer(rpc.Lookup[func([]propagate.Option) rpc.Layer]("propagate")(opts))
}

// ShortCircuit returns the server guard (package shortcircuit) for connect handlers:
// the floor, and admission under a concurrency limit, as
// [shortcircuit.UnaryServerInterceptor] applies them, keyed by procedure; streams
// are held to the floor only, as [shortcircuit.StreamServerInterceptor] holds them. A
// refusal is CodeDeadlineExceeded with grpc-retry-pushback-ms: -1 for lack of time,
// or CodeResourceExhausted with RetryInfo and grpc-retry-pushback-ms for a full
// queue. On a client it does nothing.
func ShortCircuit(opts ...shortcircuit.Option) connect.Interceptor {
	return layer(rpc.Lookup[func([]shortcircuit.Option) rpc.Layer]("shortcircuit")(opts))
}

// Retry returns the retry layer (package retry). On a client, it retries unary calls
// as [retry.UnaryClientInterceptor] does, on the same classification of the same
// codes: UNAVAILABLE; DEADLINE_EXCEEDED of its own per-attempt timeout, and
// RESOURCE_EXHAUSTED with RetryInfo, for a call that may run twice (a procedure whose
// Spec declares NO_SIDE_EFFECTS or IDEMPOTENT, one declared with
// [retry.WithIdempotentMethods], or a call with an idempotency-key). Each attempt
// sends a request of its own, with grpc-previous-rpc-attempts after the first;
// streams are not retried. On a handler, it is the one-layer rule of
// [retry.UnaryServerInterceptor].
func Retry(opts ...retry.Option) connect.Interceptor {
	return layer(rpc.Lookup[func([]retry.Option) rpc.Layer]("retry")(opts))
}

// Hedge returns the hedging layer (package hedge), with a [hedge.Hedger] of its own
// made from opts: an idempotent unary call (as for [Retry]; a call made idempotent
// by its idempotency-key alone only under [hedge.WithKeyedWrites]) still running
// after the observed latency percentile of its procedure gets a hedge, a request of
// its own (its header and message, a proto.Message, copied from the caller's while
// the call is undecided: a hedge still running once the call has returned never
// reads the request the caller may change and send again); the first answer wins
// and the others are cancelled. On a handler it does nothing.
func Hedge(opts ...hedge.Option) connect.Interceptor {
	return layer(rpc.Lookup[func(*hedge.Hedger, []string) rpc.Layer]("hedge")(hedge.New(opts...), nil))
}

// Breaker returns the circuit breaker (package breaker), with a [breaker.Breaker] of
// its own made from opts: a circuit per host and port of the client's URL, outcomes
// classified as gRPC calls' are, and a refused call fails at once, unsent, with
// CodeUnavailable and the time to the next probe as its grpc-retry-pushback-ms, an
// error matching [breaker.ErrOpen]. A stream is admitted before its first message
// goes out (a refused one sends nothing, and ends what the layers beneath started
// for it), and its outcome counted when it ends; a stream admitted as a half-open
// probe is judged at its first message, so that a long-lived watch closes the
// circuit as soon as it answers. On a handler it does nothing.
func Breaker(opts ...breaker.Option) connect.Interceptor {
	return layer(rpc.Lookup[func(*breaker.Breaker) rpc.Layer]("breaker")(breaker.New(opts...)))
}

func layer(l rpc.Layer) connect.Interceptor {
	return &interceptor{client: l.Client, stream: l.Stream, admit: l.StreamAdmit, server: l.Server, resends: l.Resends, stamps: l.Stamps}
}
