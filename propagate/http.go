package propagate

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptrace"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/attempts"
	"github.com/deadlinekit/deadlinekit/internal/cancelbody"
	"github.com/deadlinekit/deadlinekit/internal/handlerwork"
	"github.com/deadlinekit/deadlinekit/internal/handoff"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/internal/record"
)

// NewTransport returns an http.RoundTripper that writes the request's budget into
// every request it sends: grpc-timeout (and Connect-Timeout-Ms with
// [WithConnectTimeoutHeader]) carries the time left on the request's context at the
// moment of sending, minus the reserve ([WithReserve], [WithReserveFraction]), capped
// by [WithMaxPerHop], rounded down. With no option it passes exactly the time left.
//
// When nothing is left, or less than the floor ([WithFloor], default
// [deadline.MinFloor]), RoundTrip returns an error wrapping
// context.DeadlineExceeded (a *deadline.BudgetError) without sending, whatever base
// would have done. A request whose context has no deadline goes out without a header,
// unless [WithDefaultTimeout] is set.
//
// Every request also carries the level of its context (package criticality) in
// Deadlinekit-Criticality ([HeaderCriticality]), on every attempt, except the
// default level, critical, which an absent header means: a level header the
// request already has (forwarded from the caller's request) is replaced or
// removed, so that what goes out is always the context's level.
//
// The caller's request is never modified: the headers are set on a shallow copy with its
// own header map. A nil base means http.DefaultTransport.
func NewTransport(base http.RoundTripper, opts ...Option) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base, cfg: newConfig(opts)}
}

type transport struct {
	base http.RoundTripper
	cfg  *config
}

// RoundTrip writes the budget into a copy of req and sends it. The call's span
// ([record.StartCall]) is started here when no layer above has one, and ends with
// the answer's body, or at once when the base transport panics.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.RoundTripAttempt(req, handoff.Attempt{})
}

// RoundTripAttempt is RoundTrip for a layer above that did part of its work
// already (package internal/handoff): a is what it did.
func (t *transport) RoundTripAttempt(req *http.Request, a handoff.Attempt) (*http.Response, error) {
	ctx, call := record.StartCall(req.Context(), record.HTTP, req.Method)
	return call.RoundTripHTTP(func() (*http.Response, error) { return t.roundTrip(ctx, req, call.Started(), a) })
}

// DeriveAttempt returns the child of ctx that RoundTrip would send an attempt
// under, when it would derive one (package internal/handoff).
func (t *transport) DeriveAttempt(ctx context.Context) (context.Context, context.CancelFunc, bool) {
	if t.cfg.policy == (deadline.Policy{}) {
		return ctx, noop, false
	}
	child, cancel, err := t.cfg.policy.Derive(ctx)
	if err != nil || child == ctx {
		return ctx, noop, false
	}
	return child, cancel, true
}

// derive returns the context an attempt under ctx is sent under, its cancel, and
// the time left on it; derived: ctx is that context already (handoff.Attempt).
func (t *transport) derive(ctx context.Context, derived bool) (child context.Context, cancel context.CancelFunc, left time.Duration, has bool, err error) {
	if derived || t.cfg.policy == (deadline.Policy{}) {
		// The default: the time left passes through; one reading of the clock.
		left, has = deadline.Remaining(ctx)
		return ctx, noop, left, has, nil
	}
	if child, cancel, err = t.cfg.policy.Derive(ctx); err != nil {
		return ctx, noop, 0, false, err
	}
	left, has = deadline.Remaining(child)
	return child, cancel, left, has, nil
}

// roundTrip is RoundTrip under ctx, the call's context; inject says this layer
// started the call's span, whose trace context the request must carry.
func (t *transport) roundTrip(ctx context.Context, req *http.Request, inject bool, a handoff.Attempt) (*http.Response, error) {
	child, cancel, left, has, err := t.derive(ctx, a.Derived)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	if !has {
		if v, change := levelChange(ctx, req.Header); change {
			req = req.WithContext(ctx)
			req.Header = req.Header.Clone()
			setLevel(req.Header, v)
		} else if ctx != req.Context() {
			req = req.WithContext(ctx)
		}
		return t.base.RoundTrip(req)
	}
	if left <= 0 {
		cancel()
		closeBody(req)
		return nil, &deadline.BudgetError{Remaining: left, Needed: t.cfg.policy.Floor}
	}
	h := req.Header
	if !a.OwnsHeader || h == nil {
		h = make(http.Header, len(req.Header)+3)
		maps.Copy(h, req.Header)
	}
	if v, change := levelChange(ctx, h); change {
		setLevel(h, v)
	}
	st := &stamp{ctx: child}
	st.grpc[0] = EncodeGRPCTimeout(left)
	h[HeaderGRPCTimeout] = st.grpc[:]
	if t.cfg.sendConnect {
		st.connect[0] = EncodeConnectTimeout(left)
		h[HeaderConnectTimeout] = st.connect[:]
	}
	// The values above are right if the connection is ready; when the transport
	// first has to dial (and shake hands), GotConn writes them again, so that the
	// time spent connecting is not handed to the downstream.
	st.trace.GotConn = st.gotConn
	// With no instrumentation above, the downstream's span is still a child of the
	// call's span. (Otherwise the user's instrumentation, or the retry and hedge
	// layers for each attempt, wrote the trace context already.)
	if inject {
		record.InjectHTTP(child, h)
	}
	out := req.WithContext(httptrace.WithClientTrace(child, &st.trace))
	out.Header = h
	record.BudgetSent(child, left)
	resp, err := t.base.RoundTrip(out)
	if child == ctx {
		return resp, err
	}
	// The call runs under a shorter deadline than the caller's: keep it alive until
	// the response body is done with.
	if err != nil || resp == nil || resp.Body == nil {
		cancel()
		return resp, err
	}
	resp.Body = cancelbody.Wrap(resp.Body, cancel)
	return resp, nil
}

// stamp rewrites the budget headers of one request when its connection is ready.
// It holds the values and the trace in one allocation.
type stamp struct {
	ctx           context.Context
	trace         httptrace.ClientTrace
	grpc, connect [1]string
}

// gotConn runs on the sending goroutine after the transport obtained a connection and
// before it writes the request's headers.
func (s *stamp) gotConn(info httptrace.GotConnInfo) {
	if info.Reused {
		return // no dial happened: the value written before sending stands
	}
	left, _ := deadline.Remaining(s.ctx)
	s.grpc[0] = EncodeGRPCTimeout(left)
	if s.connect[0] != "" {
		s.connect[0] = EncodeConnectTimeout(left)
	}
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// NewMiddleware returns HTTP middleware that applies the caller's budget to the
// request's context before the next handler runs.
//
// Headers are read in this order of precedence, the first present one winning:
//
//  1. grpc-timeout (gRPC spec grammar; what this package's transport sends)
//  2. Connect-Timeout-Ms (Connect protocol)
//  3. X-Envoy-Expected-Rq-Timeout-Ms, only with [WithTrustEnvoy]
//
// The budget is clamped to [WithMaxTimeout] (default 5 minutes). With no header, the
// default budget applies ([WithDefaultTimeout], default 30 s). A request to a route
// the server declared streaming ([WithStreamingHTTP], [StreamingRoutes]) gets
// neither: it keeps its caller's deadline or none, bounded only by
// [WithMaxStreamTimeout]. By default no route is: what a request claims (Accept:
// text/event-stream, an Upgrade, a Connect streaming content type) never makes it a
// stream, so that no caller lifts the default and the clamp off an ordinary
// handler by adding a header. A malformed header, or
// the same header repeated, is answered with 400 Bad Request naming the header, unless
// [WithIgnoreMalformed] is set. A request that arrives with no time left is answered
// with 504 Gateway Timeout without calling the handler, and the header
// grpc-retry-pushback-ms: -1, so that the caller's retry layers do not retry it: a
// retry could only arrive with less time.
//
// A trusted caller's Deadlinekit-Criticality ([HeaderCriticality]) puts its level on
// the request's context (criticality.From); the same header twice, or a value
// criticality.Parse refuses, is answered 400 naming it, unless
// [WithIgnoreMalformed]. An untrusted caller's ([WithTrustHTTP]) is ignored and
// removed: it cannot promote itself.
//
// The handler finds the applied budget with [InboundFromContext]; its context is
// cancelled when the budget runs out. A request that is itself a copy
// (grpc-previous-rpc-attempts ≥ 1) or that a hedging layer above may send again
// (deadlinekit-hedged-above) gets a context whose calls package hedge does not hedge:
// the chain rule, see package hedge.
func NewMiddleware(opts ...Option) func(http.Handler) http.Handler {
	c := newConfig(opts)
	return func(next http.Handler) http.Handler {
		serve := serveUnder(next)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c.trustHTTP != nil && !c.trustHTTP(r) {
				r = stripUntrusted(r)
			}
			// The handler's context, given to a copy of r once, at the end. A layer
			// above may send this request again (covered): its handler's calls are
			// not hedged (the chain rule, package hedge); the mark goes on the
			// context with the Inbound.
			ctx := r.Context()
			covered := attempts.Covers(r.Header.Get(attempts.CoveredHeader), r.Header.Get(attempts.Header))
			in, found, err := c.readHTTP(r.Header)
			if err != nil {
				http.Error(w, "propagate: "+err.Error(), http.StatusBadRequest)
				return
			}
			if vs := r.Header[HeaderCriticality]; len(vs) > 0 {
				if ctx, err = c.inboundLevel(ctx, vs); err != nil {
					http.Error(w, "propagate: "+err.Error(), http.StatusBadRequest)
					return
				}
			}
			stream := false
			if c.streamHTTP != nil {
				if ctx = withCovered(ctx, covered); ctx != r.Context() {
					r = r.WithContext(ctx) // the predicate sees the context the handler will
				}
				covered = false // on ctx already
				stream = c.streamHTTP(r)
			}
			if !found {
				d := c.defaultBudget(stream)
				if d <= 0 {
					if ctx = withCovered(ctx, covered); ctx != r.Context() {
						r = r.WithContext(ctx)
					}
					next.ServeHTTP(w, r)
					return
				}
				in = Inbound{Budget: d, Source: SourceDefault}
			}
			c.clamp(&in, stream)
			if in.Budget <= 0 {
				record.Inbound(ctx, in.Budget, in.Source, in.Clamped)
				w.Header().Set(pushback.Key, pushback.DoNotRetry)
				http.Error(w, "propagate: request arrived with no time left ("+in.Source+": "+deadline.Format(in.Budget)+")", http.StatusGatewayTimeout)
				return
			}
			ctx, cancel := context.WithTimeout(ctx, in.Budget)
			defer cancel()
			record.Inbound(ctx, in.Budget, in.Source, in.Clamped)
			serve(w, r, withInbound(ctx, in, covered))
		})
	}
}

// serveUnder returns how the middleware hands a request to next under ctx: a copy
// of it with ctx, or, when next is retry's server side, the request and ctx, of
// which it makes its one copy (package internal/handlerwork).
func serveUnder(next http.Handler) func(http.ResponseWriter, *http.Request, context.Context) {
	if h, ok := next.(handlerwork.ContextHandler); ok {
		return func(w http.ResponseWriter, r *http.Request, ctx context.Context) {
			h.ServeHTTPContext(w, r, ctx, handlerwork.Seam{})
		}
	}
	return func(w http.ResponseWriter, r *http.Request, ctx context.Context) {
		next.ServeHTTP(w, r.WithContext(ctx))
	}
}

// stripUntrusted returns a copy of r without the deadline and attempt headers.
func stripUntrusted(r *http.Request) *http.Request {
	r = r.WithContext(r.Context())
	r.Header = r.Header.Clone()
	for _, h := range untrustedHeaders {
		r.Header.Del(h)
	}
	return r
}

// readHTTP finds the inbound budget in h, in precedence order.
func (c *config) readHTTP(h http.Header) (Inbound, bool, error) {
	for _, src := range [...]struct {
		name, source string
		decode       func(string) (time.Duration, error)
		on           bool
	}{
		{HeaderGRPCTimeout, SourceGRPCTimeout, DecodeGRPCTimeout, true},
		{HeaderConnectTimeout, SourceConnectTimeout, DecodeConnectTimeout, true},
		{HeaderEnvoyTimeout, SourceEnvoyTimeout, DecodeEnvoyTimeout, c.trustEnvoy},
	} {
		vs := h[src.name]
		if !src.on || len(vs) == 0 {
			continue
		}
		var d time.Duration
		var err error
		if len(vs) > 1 {
			err = malformed(src.name, vs[0], fmt.Sprintf("header repeated %d times", len(vs)))
		} else {
			d, err = src.decode(vs[0])
		}
		if err != nil {
			if c.ignoreMalformed {
				continue
			}
			return Inbound{}, false, err
		}
		return Inbound{Budget: d, Source: src.source}, true, nil
	}
	return Inbound{}, false, nil
}

var _ handoff.Transport = (*transport)(nil)
