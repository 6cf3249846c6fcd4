package propagate

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/attempts"
)

// DefaultMaxTimeout is the largest inbound budget a server accepts before clamping it
// ([WithMaxTimeout]). Inbound deadline headers are untrusted input: without a clamp, a
// caller could ask a server to hold resources for years.
const DefaultMaxTimeout = 5 * time.Minute

// Option configures the adapters of this package. Options that concern only one side
// (client or server) are documented as such and ignored by the other.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	// client side
	policy      deadline.Policy
	sendConnect bool
	// server side
	maxTimeout      time.Duration
	serverDefault   time.Duration
	maxStream       time.Duration            // zero: a stream's budget is the caller's, unclamped
	streamHTTP      func(*http.Request) bool // nil: no HTTP request is a stream
	ignoreMalformed bool
	trustEnvoy      bool
	trustHTTP       func(*http.Request) bool
	trustGRPC       func(context.Context) bool
}

func newConfig(opts []Option) *config {
	c := &config{
		policy:        deadline.Policy{Floor: deadline.MinFloor},
		maxTimeout:    DefaultMaxTimeout,
		serverDefault: deadline.DefaultBudget,
	}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	return c
}

// WithReserve keeps d of the time left for the caller's own work after the downstream
// answers: the downstream is sent (time left − d). Client side. Default 0.
func WithReserve(d time.Duration) Option {
	return optionFunc(func(c *config) { c.policy.Reserve = d })
}

// WithReserveFraction keeps a fraction f (in [0, 1]) of the time left for the caller,
// in addition to [WithReserve]. Client side. Default 0.
func WithReserveFraction(f float64) Option {
	return optionFunc(func(c *config) { c.policy.ReserveFraction = f })
}

// WithMaxReserveFraction bounds the reserve ([WithReserve], [WithReserveFraction]) at
// a fraction f (in [0, 1]) of the time left, so that a fixed reserve does not eat a
// short budget (see [deadline.Policy].MaxReserveFraction). Client side. Default 0: no
// bound.
func WithMaxReserveFraction(f float64) Option {
	return optionFunc(func(c *config) { c.policy.MaxReserveFraction = f })
}

// WithMaxPerHop caps the budget sent to any one downstream call at d, and shortens the
// call's own deadline to match. Client side. Default: no cap.
func WithMaxPerHop(d time.Duration) Option {
	return optionFunc(func(c *config) { c.policy.MaxPerHop = d })
}

// WithFloor makes a call fail at once, without sending anything, when the budget it
// would send is below d: the downstream could not do useful work with it. The error is
// a *deadline.BudgetError (gRPC DeadlineExceeded). Client side. Default
// [deadline.MinFloor] (1 ms); zero sends any positive budget.
//
// The default is small on purpose: a client cannot know what the downstream needs
// (its guard learns that from its own handler, package shortcircuit), and a floor
// of its own at every hop of a chain compounds: with 20 ms per hop, a chain of 2 ms
// handlers needed 45 ms of budget to answer in 15.
func WithFloor(d time.Duration) Option {
	return optionFunc(func(c *config) { c.policy.Floor = d })
}

// WithDefaultTimeout sets the budget used when none is known. Client side: a call whose
// context has no deadline gets d (default: none, the call goes out without a deadline
// header). Server side: a unary request that carried no deadline gets d (default
// [deadline.DefaultBudget], 30 s). Zero or less means no default on either side.
//
// A stream never gets the default: a gRPC or connect streaming call, and an HTTP
// request to a route the server declared streaming ([WithStreamingHTTP]), keep the
// deadline their caller sent, or none. A watch or a long download whose handler
// watches its context would otherwise die at 30 s, a timeout used as the whole
// budget of something that has none. [WithMaxStreamTimeout] bounds a stream's life when the server wants one.
func WithDefaultTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		c.policy.Default = max(d, 0)
		c.serverDefault = max(d, 0)
	})
}

// WithConnectTimeoutHeader makes the HTTP client transport also send
// Connect-Timeout-Ms (whole milliseconds, rounded down) beside grpc-timeout, for
// Connect-protocol servers. Client side. Default: off.
func WithConnectTimeoutHeader() Option {
	return optionFunc(func(c *config) { c.sendConnect = true })
}

// WithMaxTimeout clamps inbound budgets of unary requests to d. Server side. Default
// [DefaultMaxTimeout] (5 minutes). Zero or less disables the clamp. Streams are not
// clamped by it ([WithMaxStreamTimeout]).
func WithMaxTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.maxTimeout = d })
}

// WithMaxStreamTimeout bounds the life of every stream (gRPC and connect streaming
// calls, HTTP requests to the routes [WithStreamingHTTP] declares streaming) at d: a
// stream whose caller sent a longer budget, or none, gets d. Server side. Default:
// none, a stream keeps its caller's deadline, however long, and one that came
// without a deadline has none.
//
// Why streams are not clamped by [WithMaxTimeout]: the clamp keeps a caller from
// holding a unary handler for years by asking for it, but a stream's caller holds it
// as long as it likes by sending no deadline at all; cutting a stated deadline
// protects nothing and kills the long watches that stated theirs. A server that
// must bound its streams' life says so here, for every stream alike.
func WithMaxStreamTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.maxStream = max(d, 0) })
}

// WithStreamingHTTP declares which HTTP requests the middleware treats as streams:
// those for which f, the server's own account of what its routes serve, reports
// true. A stream gets no default budget, and [WithMaxStreamTimeout] instead of the
// unary clamp. Declare by route, most simply with [StreamingRoutes]:
//
//	propagate.WithStreamingHTTP(propagate.StreamingRoutes("GET /events", "GET /ws"))
//
// Server side. Default (and nil): no HTTP request is a stream; every one gets the
// default budget and the clamp, whatever it asks for.
//
// What the route serves decides, never what the request claims. Accept:
// text/event-stream, an Upgrade header, a Connect streaming content type are
// headers any caller can put on an ordinary POST; a server that believed them
// would run that POST's handler, and every call it makes, with no deadline or with
// the years its caller asked for. Only on a route that does stream is a caller's
// claim harmless: it can hold that route open anyway, by sending no deadline.
//
// A connect-go handler needs no declaration of its own when it has
// connectkit.HandlerOption (or connectkit.Propagate): that interceptor knows each
// procedure's stream type and applies the stream rules to streaming procedures. When
// this middleware is also in front of it (deadlinekit.NewHandler over the mux),
// declare the service's route streaming here, e.g. StreamingRoutes("/pkg.Store/"),
// so that the middleware does not cut its streams at the unary default: the
// interceptor then gives its unary procedures the default budget and the clamp.
func WithStreamingHTTP(f func(r *http.Request) bool) Option {
	return optionFunc(func(c *config) { c.streamHTTP = f })
}

// StreamingRoutes returns a predicate for [WithStreamingHTTP] that calls streaming
// the requests an [http.ServeMux] holding exactly the given patterns would route to
// one of them: the same syntax and the same matching (method, host, wildcards, path
// cleaning) as the mux that serves them, so that a route is declared streaming with
// the pattern it was registered under:
//
//	mux.HandleFunc("GET /events", sse)
//	mux.HandleFunc("GET /ws", websocket)
//	h := deadlinekit.NewHandler(mux, deadlinekit.WithPropagate(
//		propagate.WithStreamingHTTP(propagate.StreamingRoutes("GET /events", "GET /ws"))))
//
// A request the mux would answer with a redirect (an unclean path, a missing
// trailing slash) or a 405 is not a stream. It panics, as [http.ServeMux.Handle]
// does, on a pattern that is invalid or conflicts with another of the list.
func StreamingRoutes(patterns ...string) func(r *http.Request) bool {
	mux := http.NewServeMux()
	seen := make(map[string]bool, len(patterns))
	for _, p := range patterns {
		if !seen[p] {
			seen[p] = true
			mux.Handle(p, streamRoute{})
		}
	}
	return func(r *http.Request) bool {
		h, _ := mux.Handler(r)
		_, ok := h.(streamRoute)
		return ok
	}
}

// streamRoute marks a pattern of [StreamingRoutes]; it never serves.
type streamRoute struct{}

func (streamRoute) ServeHTTP(http.ResponseWriter, *http.Request) {}

// StreamingRequest reports whether r asks for an answer that streams: it accepts
// text/event-stream (server-sent events), or asks to switch protocols (an Upgrade
// header other than h2c: WebSocket), or is a Connect streaming call (content type
// application/connect+…). (A gRPC request's content type is the same for unary calls
// and streams: the gRPC server interceptors and connectkit tell them apart.)
//
// It reads only what the caller claims, so it never declares a stream alone: given
// to [WithStreamingHTTP] by itself, it would let any caller lift the default budget
// and the clamp off any route by adding a header. Use it within routes that do
// stream, for a route that answers either way by what the caller accepts:
//
//	feed := propagate.StreamingRoutes("GET /feed")
//	propagate.WithStreamingHTTP(func(r *http.Request) bool {
//		return feed(r) && propagate.StreamingRequest(r)
//	})
func StreamingRequest(r *http.Request) bool {
	if u := r.Header.Get("Upgrade"); u != "" && !strings.EqualFold(strings.TrimSpace(u), "h2c") {
		return true // (an h2c upgrade is a plain request over HTTP/2)
	}
	for _, v := range r.Header.Values("Accept") {
		if acceptsEventStream(v) {
			return true
		}
	}
	return strings.HasPrefix(strings.ToLower(r.Header.Get("Content-Type")), "application/connect+")
}

// acceptsEventStream reports whether one Accept value lists text/event-stream with
// a weight above zero.
func acceptsEventStream(v string) bool {
	for part := range strings.SplitSeq(v, ",") {
		mt, params, _ := strings.Cut(part, ";")
		if !strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
			continue
		}
		zero := false
		for p := range strings.SplitSeq(params, ";") {
			k, val, _ := strings.Cut(p, "=")
			if strings.EqualFold(strings.TrimSpace(k), "q") {
				if q, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil && q <= 0 {
					zero = true
				}
			}
		}
		if !zero {
			return true
		}
	}
	return false
}

// WithIgnoreMalformed makes the server treat a malformed deadline header as absent
// (the next header in precedence order, or the default, applies) instead of answering
// HTTP 400 / gRPC InvalidArgument; and a malformed deadlinekit-criticality as absent
// (the request is critical). Server side. Default: malformed headers are refused.
func WithIgnoreMalformed() Option {
	return optionFunc(func(c *config) { c.ignoreMalformed = true })
}

// WithTrustEnvoy makes the server read X-Envoy-Expected-Rq-Timeout-Ms, the budget an
// Envoy proxy in front of it expects the request to take. Enable it only when every
// request passes through a proxy you run: the header is otherwise as untrusted as any
// other. Server side. Default: off.
func WithTrustEnvoy() Option {
	return optionFunc(func(c *config) { c.trustEnvoy = true })
}

// WithTrustHTTP decides, per HTTP request, whether the caller's deadline and attempt
// headers are believed. For a request f refuses (a caller from outside, say), the
// middleware ignores grpc-timeout, Connect-Timeout-Ms and X-Envoy-Expected-Rq-Timeout-Ms
// (the default budget applies) and deadlinekit-criticality (the request keeps the
// default level, critical: a caller cannot promote itself), and strips them, with
// grpc-previous-rpc-attempts and deadlinekit-hedged-above (the hedging chain rule's
// mark), from the request the handler sees, so that nothing it forwards carries
// them on.
// Server side. Default: every caller is trusted (and clamped).
func WithTrustHTTP(f func(r *http.Request) bool) Option {
	return optionFunc(func(c *config) { c.trustHTTP = f })
}

// WithTrustGRPC is [WithTrustHTTP] for the gRPC server interceptors: for a call f refuses,
// X-Envoy-Expected-Rq-Timeout-Ms, grpc-previous-rpc-attempts,
// deadlinekit-hedged-above and deadlinekit-criticality are ignored and removed from
// the incoming metadata the handler sees. grpc-timeout itself cannot be ignored:
// grpc-go applies it to the stream before any interceptor runs and ends the call at
// it whatever the handler does; [WithMaxTimeout] still clamps it. Server side.
// Default: every caller is trusted.
func WithTrustGRPC(f func(ctx context.Context) bool) Option {
	return optionFunc(func(c *config) { c.trustGRPC = f })
}

// Headers an untrusted caller's request is stripped of.
var untrustedHeaders = [...]string{HeaderGRPCTimeout, HeaderConnectTimeout, HeaderEnvoyTimeout, attempts.Header, attempts.CoveredHeader, HeaderCriticality}

// Inbound describes the deadline a server applied to a request: what budget it got,
// where from, and whether the clamp cut it. Read it with [InboundFromContext] in a
// handler or a later middleware.
type Inbound struct {
	Budget  time.Duration // the budget applied to the request's context
	Source  string        // where it came from: one of the Source constants
	Clamped bool          // the inbound budget was above the maximum and was cut to it
}

// Values of [Inbound].Source: the lower-case name of the header the budget came from,
// or SourceDefault when none came and the server's default applied (for a stream,
// the stream maximum).
const (
	SourceGRPCTimeout    = "grpc-timeout"
	SourceConnectTimeout = "connect-timeout-ms"
	SourceEnvoyTimeout   = "x-envoy-expected-rq-timeout-ms"
	SourceDefault        = "default"
)

type inboundKey struct{}

// inboundCtx carries a request's Inbound, and the chain rule's mark when the request
// is covered (attempts.WithCovered): one allocation where context.WithValue and the
// Inbound it points to would be two, and the mark a third.
type inboundCtx struct {
	context.Context
	in      Inbound
	covered bool
}

func (c *inboundCtx) Value(key any) any {
	if key == (inboundKey{}) {
		return &c.in
	}
	if c.covered && attempts.IsCoveredKey(key) {
		return true
	}
	return c.Context.Value(key)
}

// withInbound returns ctx with in, and marked covered when covered.
func withInbound(ctx context.Context, in Inbound, covered bool) context.Context {
	return &inboundCtx{Context: ctx, in: in, covered: covered}
}

// withCovered returns ctx marked covered when covered (attempts.WithCovered), for a
// request that gets no Inbound.
func withCovered(ctx context.Context, covered bool) context.Context {
	if covered {
		return attempts.WithCovered(ctx)
	}
	return ctx
}

// InboundFromContext returns the inbound deadline the server middleware or interceptor
// applied to ctx.
func InboundFromContext(ctx context.Context) (Inbound, bool) {
	in, ok := ctx.Value(inboundKey{}).(*Inbound)
	if !ok {
		return Inbound{}, false
	}
	return *in, true
}

// clamp applies the server's maximum to an inbound budget: [WithMaxTimeout] for a
// unary request, [WithMaxStreamTimeout] for a stream.
func (c *config) clamp(in *Inbound, stream bool) {
	limit := c.maxTimeout
	if stream {
		limit = c.maxStream
	}
	if limit > 0 && in.Budget > limit {
		in.Budget = limit
		in.Clamped = true
	}
}

// defaultBudget is the budget of a request that came without one: the unary default,
// or for a stream the stream maximum (none by default). Zero: none.
func (c *config) defaultBudget(stream bool) time.Duration {
	if stream {
		return c.maxStream
	}
	return c.serverDefault
}
