package deadlinekit

import (
	"net/http"

	"google.golang.org/grpc"

	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/rpc"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// NewHandler returns h behind the server side of the stack, outermost first:
// propagate (read the caller's budget, clamp it, set it on the context) → retry's
// server side (the one-layer rule) → shortcircuit (refuse what the budget left
// cannot pay for) → dedup, with [WithDedup] (replay, wait, or run and record) → h.
//
// The order is the design's rule: a request the guard refuses never reaches dedup,
// so nothing is recorded for it; a replay costs one store read. A replay, or a
// repeat waiting for the first request with its key, is not h's work: dedup tells
// the guard so (internally, for requests that carry an Idempotency-Key), and the
// request gives its concurrency slot back, teaches no floor and counts in no
// overrun; a repeat that takes the key over is admitted again before h runs. And
// dedup, inside retry's server side, stores the answer as the caller received it,
// with the "do not retry" retry's server side adds when h's own retries gave up.
// With [WithEdge], the edge's key check and writer go outside propagate. Put the
// user's tracing (otelhttp.NewHandler) outside it, so that the refusals are on the
// server span:
//
//	srv := &http.Server{Handler: otelhttp.NewHandler(deadlinekit.NewHandler(mux), "svc")}
func NewHandler(h http.Handler, opts ...Option) http.Handler {
	c := newConfig(opts)
	if c.edge {
		h = edgeInner(h)
	}
	if c.dedup.store != nil {
		h = dedup.NewMiddleware(c.dedup.store, c.dedupOptions()...)(h)
	} else if c.has(Keys) {
		h = dedup.PassKeys(c.dedupOptions()...)(h)
	}
	if c.has(ShortCircuit) {
		h = shortcircuit.NewMiddleware(c.shortcircuitOptions()...)(h)
	}
	if c.has(Retry) {
		h = retry.NewMiddleware()(h)
	}
	if c.level != nil {
		h = levelHTTP(c.level, h)
	}
	if c.has(Propagate) {
		h = propagate.NewMiddleware(c.propagateOptions()...)(h)
	}
	if c.edge {
		h = edgeOuter(edgeDropLevelHTTP(h))
	}
	return h
}

// NewTransport returns base (nil: [http.DefaultTransport]) behind the client side of
// the stack, outermost first: retry → breaker (a circuit per host, and its adaptive
// throttle: a host that refuses for load is sent less; off with
// WithBreaker(breaker.WithoutAdaptiveThrottling())) → hedge →
// propagate (write the budget left when each attempt is sent, minus the reserve) →
// base. One transport is one client: its calls share one retry budget, one set of
// circuits and one [hedge.Hedger] unless [WithRetry], [WithSharedBreaker] and [WithSharedHedger] say otherwise. Put the user's tracing outside it
// (otelhttp.NewTransport(deadlinekit.NewTransport(nil))): its client span is then the
// call's span, and the toolkit's attempt spans are its children; without it, the
// toolkit starts the call's span itself.
func NewTransport(base http.RoundTripper, opts ...Option) http.RoundTripper {
	c := newConfig(opts)
	if base == nil {
		base = http.DefaultTransport
	}
	rt := base
	if c.has(Propagate) {
		rt = propagate.NewTransport(rt, c.propagateOptions()...)
	}
	if c.has(Hedge) {
		rt = c.newHedger().Transport(rt)
	}
	if c.has(Breaker) {
		rt = c.newBreaker().Transport(rt)
	}
	if c.has(Retry) {
		rt = retry.NewTransport(rt, c.retryOptions()...)
	}
	return rt
}

// ServerOptions returns the server side of the stack for grpc.NewServer, in the order
// of [NewHandler], as unary and stream interceptor chains (streams: propagate and
// shortcircuit; the retry layer's one-layer rule applies to unary calls; dedup,
// with [WithDedup], to unary calls, under the rule of [NewHandler]). Other
// interceptors run before or after them in the order their options are given. The user's tracing is a stats handler (otelgrpc.NewServerHandler) or grpc-go's
// OpenTelemetry plugin, in the same grpc.NewServer call:
//
//	srv := grpc.NewServer(append(deadlinekit.ServerOptions(),
//		grpc.StatsHandler(otelgrpc.NewServerHandler()))...)
func ServerOptions(opts ...Option) []grpc.ServerOption {
	c := newConfig(opts)
	var unary []grpc.UnaryServerInterceptor
	var stream []grpc.StreamServerInterceptor
	if c.edge {
		unary = append(unary, edgeUnaryOuter, edgeDropLevelUnary)
		stream = append(stream, edgeStreamOuter, edgeDropLevelStream)
	}
	if c.has(Propagate) {
		po := c.propagateOptions()
		unary = append(unary, propagate.UnaryServerInterceptor(po...))
		stream = append(stream, propagate.StreamServerInterceptor(po...))
	}
	if c.level != nil {
		unary = append(unary, levelUnary(c.level))
		stream = append(stream, levelStream(c.level))
	}
	if c.has(Retry) {
		unary = append(unary, retry.UnaryServerInterceptor())
	}
	if c.has(ShortCircuit) {
		so := c.shortcircuitOptions()
		unary = append(unary, shortcircuit.UnaryServerInterceptor(so...))
		stream = append(stream, shortcircuit.StreamServerInterceptor(so...))
	}
	if c.dedup.store != nil {
		unary = append(unary, dedup.UnaryServerInterceptor(c.dedup.store, c.dedupOptions()...))
	} else if c.has(Keys) {
		unary = append(unary, dedup.PassKeysUnaryServerInterceptor(c.dedupOptions()...))
	}
	if c.edge {
		unary = append(unary, edgeUnaryInner)
		stream = append(stream, edgeStreamInner)
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...)}
}

// DialOptions returns the client side of the stack for grpc.NewClient, in the order
// of [NewTransport], as unary and stream interceptor chains (streams: breaker and
// propagate; a stream is neither retried nor hedged). One set of options is one client: its
// calls share one retry budget and one [hedge.Hedger]. The user's tracing:
// otelgrpc's stats handler (grpc.WithStatsHandler(otelgrpc.NewClientHandler())) may
// go anywhere, and its per-attempt spans hang under the toolkit's attempt spans,
// under a call span the toolkit starts; grpc-go's OpenTelemetry plugin
// (opentelemetry.DialOption) goes before these options, so that its call span
// (gRFC A72) is the one the toolkit records on.
//
// With the breaker layer on, the options also select the load-balancing policy
// [breaker.BalancerName] as the default service config: each endpoint of the target
// gets a circuit of its own, and an open one is skipped while the others serve. This
// replaces grpc-go's default policy, pick_first (every call to one endpoint), with
// round robin over the endpoints, a hedge going to another endpoint than its call's
// primary; a target with one endpoint behaves as before. A
// service config from the resolver takes precedence, as does the user's own
// grpc.WithDefaultServiceConfig placed after these options.
//
// A call whose outgoing idempotency-key metadata is malformed (a key forwarded
// from an HTTP caller with a character outside ASCII, two values, more than 255
// characters: what [dedup.ParseKey] refuses) is refused before any layer sends it,
// InvalidArgument with the reason, which HTTPStatus answers 400.
func DialOptions(opts ...Option) []grpc.DialOption {
	c := newConfig(opts)
	unary := []grpc.UnaryClientInterceptor{unaryKeyCheck}
	stream := []grpc.StreamClientInterceptor{streamKeyCheck}
	if c.has(Retry) {
		unary = append(unary, retry.UnaryClientInterceptor(c.retryOptions()...))
	}
	if c.has(Breaker) {
		b := c.newBreaker()
		unary = append(unary, b.UnaryClientInterceptor())
		stream = append(stream, b.StreamClientInterceptor())
	}
	if c.has(Hedge) {
		unary = append(unary, c.hedgeInterceptor())
	}
	if c.has(Propagate) {
		po := c.propagateOptions()
		unary = append(unary, propagate.UnaryClientInterceptor(po...))
		stream = append(stream, propagate.StreamClientInterceptor(po...))
	}
	do := []grpc.DialOption{grpc.WithChainUnaryInterceptor(unary...), grpc.WithChainStreamInterceptor(stream...)}
	if c.has(Breaker) {
		do = append(do, grpc.WithDefaultServiceConfig(breaker.ServiceConfig))
	}
	return do
}

// hedgeInterceptor is the gRPC client's hedging layer.
func (c *config) hedgeInterceptor() grpc.UnaryClientInterceptor {
	if also := c.sharedIdempotent(); len(also) > 0 {
		return rpc.Lookup[func(*hedge.Hedger, []string) grpc.UnaryClientInterceptor]("hedge.grpc")(c.hedger, also)
	}
	return c.newHedger().UnaryClientInterceptor()
}
