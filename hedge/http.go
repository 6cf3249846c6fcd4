package hedge

import (
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/attempts"
	"github.com/deadlinekit/deadlinekit/internal/cancelbody"
	"github.com/deadlinekit/deadlinekit/internal/drain"
	"github.com/deadlinekit/deadlinekit/internal/handoff"
	"github.com/deadlinekit/deadlinekit/internal/idempotency"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/internal/record"
)

// NewTransport returns [Hedger.Transport](base) of a [Hedger] of its own, made from
// opts: it hedges idempotent requests after the observed latency percentile of their
// host. A nil base means http.DefaultTransport.
func NewTransport(base http.RoundTripper, opts ...Option) http.RoundTripper {
	return New(opts...).Transport(base)
}

// Transport returns an http.RoundTripper that hedges idempotent requests sent
// through base (nil: http.DefaultTransport), with h's state. base must honour each
// request's context: losers are stopped by cancelling it.
//
// Requests with method GET, HEAD, OPTIONS, TRACE, PUT or DELETE (the empty method is
// GET) are hedged, as package retry decides, and so are other requests with an
// Idempotency-Key header that is not blank (keyed writes) under [WithKeyedWrites];
// when they have a body, only if GetBody can replay it, every attempt getting its
// own body. Other requests are sent once through base, unchanged. Each
// hedge is a copy of the request with its own context, URL and header map, carrying
// Grpc-Previous-Rpc-Attempts (added to the count of a retry layer above), taken
// while the call is undecided: a loser still running once the call has returned
// never reads the caller's request, which the caller may change and send again
// once the answer's body is closed. The caller's request is never modified.
//
// An answer is a status below 400 (a success) or another 4xx but 408 and 429; a
// failure is a transport error, a 5xx, 408 or 429. A refusal for lack of budget is a
// failure carrying grpc-retry-pushback-ms with a negative value (as the toolkit's
// servers answer when their floor refuses a request), or propagate's refusal before
// sending (an error matching deadline.ErrInsufficientBudget). A hedge whose body
// cannot be replayed counts as refused: it is not sent, and gives its token back. On
// a request with an Idempotency-Key, a 409 with a positive pushback
// (grpc-retry-pushback-ms or Retry-After) is a server's deduplication refusing a copy
// while another copy holds the key: refused too, whichever copy got it, so that the
// copy that runs brings the answer.
// The winner's context lives until its
// response body is closed or read to the end (a 101's body keeps its Write); losers
// are cancelled and their bodies drained (at most 64 KiB, at most 100 ms) and closed,
// so that their connections are reused or released. A loser cancelled before its
// answer came costs its connection over HTTP/1.1, which has no other way to abandon
// a request: net/http closes it, and a later request dials (and, over TLS, shakes
// hands) again; over HTTP/2 only the loser's stream is reset.
func (h *Hedger) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	next, _ := base.(handoff.Transport)
	return &transport{h: h, base: base, next: next}
}

type transport struct {
	h    *Hedger
	base http.RoundTripper
	// next is base when it is propagate's transport: an attempt is handed to it
	// with the header copy and the shortened deadline made here (package
	// internal/handoff).
	next handoff.Transport
}

// CloseIdleConnections closes the idle connections of the base transport, when it
// has any (http.Client.CloseIdleConnections calls it).
func (t *transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil {
		return t.base.RoundTrip(req) // let the base transport refuse it
	}
	// The call's span: a layer above (retry) started it, or the user's client span
	// (otelhttp) is it, or it is started here. Untraced, ctx is the request's own.
	ctx, call := record.StartCall(req.Context(), record.HTTP, req.Method)
	if ctx != req.Context() {
		req = req.WithContext(ctx)
	}
	owned := call.Started()
	if owned {
		// Nothing above wrote the trace context, and a call sent without a hedge
		// makes no attempt span to write it: the downstream's span must still be a
		// child of the call's. (A hedged call's attempts write their own.)
		r := *req
		r.Header = req.Header.Clone()
		if r.Header == nil {
			r.Header = make(http.Header, 1)
		}
		record.InjectHTTP(ctx, r.Header)
		req = &r
	}
	return call.RoundTripHTTP(func() (*http.Response, error) { return t.roundTrip(ctx, req, owned) })
}

// roundTrip is RoundTrip under ctx, the call's context; owned: req's header map is
// a copy of this layer's own.
func (t *transport) roundTrip(ctx context.Context, req *http.Request, owned bool) (*http.Response, error) {
	h := t.h
	ev := Event{Target: req.Host, Attempts: 1}
	if req.URL.Host != "" {
		ev.Target = req.URL.Host
	}
	replayable := !hasBody(req) || req.GetBody != nil
	write := !idempotency.Method(req.Method)
	keyedWrite := write && idempotency.Keyed(req.Header[idempotency.Header])
	switch {
	case write && !keyedWrite:
		h.notIdempotent.Add(1)
		ev.Skipped = SkipNotIdempotent
	case keyedWrite && !h.cfg.keyedWrites:
		h.keyedWrites.Add(1)
		ev.Skipped = SkipKeyedWrite
	case !replayable:
		h.notReplayable.Add(1)
		ev.Skipped = SkipNotIdempotent
	}
	covered := h.covered(ctx)
	// The chain rule's mark. A hedged call's primary gets it in the copy of the
	// request its send makes anyway: one copy, not two.
	mark := ev.Skipped == "" && h.marks() || covered
	if mark && (ev.Skipped != "" || covered) {
		req, owned = markRequest(req, owned)
	}
	if ev.Skipped == "" && covered {
		h.coveredCalls.Add(1)
		ev.Skipped = SkipCovered
		tgt, start := h.target(ev.Target, httpHost), time.Now()
		resp, err := t.send(req, owned)
		if httpVerdict(h.cfg, resp, err) == success {
			h.learnCovered(tgt, start)
		}
		recordSentOnce(ctx, &ev)
		t.observe(ctx, &ev, resp)
		return resp, err
	}
	if ev.Skipped != "" {
		resp, err := t.send(req, owned)
		recordSentOnce(ctx, &ev)
		t.observe(ctx, &ev, resp)
		return resp, err
	}

	p := h.plan(h.target(ev.Target, httpHost))
	if p.skip != "" {
		ev.Skipped = p.skip
		if mark {
			req, owned = markRequest(req, owned)
		}
		resp, err := t.send(req, owned)
		if httpVerdict(h.cfg, resp, err) == success {
			p.learnLatency()
		}
		recordSentOnce(ctx, &ev)
		t.observe(ctx, &ev, resp)
		return resp, err
	}
	return t.hedged(ctx, req, ev.Target, p, keyedWrite, mark)
}

func hasBody(req *http.Request) bool { return req.Body != nil && req.Body != http.NoBody }

// send sends a copy of the call that is not hedged; owned: req's header map is
// this layer's own, which the propagate transport below may write into.
func (t *transport) send(req *http.Request, owned bool) (*http.Response, error) {
	if t.next != nil {
		return t.next.RoundTripAttempt(req, handoff.Attempt{OwnsHeader: owned})
	}
	return t.base.RoundTrip(req)
}

// markRequest returns req carrying the chain rule's mark: req itself when its
// header map is this layer's own (owned) or carries the mark already, else a copy
// with a header map of its own (the caller's request is never modified).
func markRequest(req *http.Request, owned bool) (*http.Request, bool) {
	if marked(req.Header) {
		return req, owned
	}
	if owned {
		req.Header[attempts.CoveredHeader] = []string{attempts.CoveredValue}
		return req, true
	}
	m := &markedRequest{r: *req, v: [1]string{attempts.CoveredValue}}
	m.r.Header = make(http.Header, len(req.Header)+4)
	maps.Copy(m.r.Header, req.Header)
	m.r.Header[attempts.CoveredHeader] = m.v[:]
	return &m.r, true
}

// marked reports whether h carries the chain rule's mark, covered, already.
func marked(h http.Header) bool {
	vs := h[attempts.CoveredHeader]
	return len(vs) == 1 && vs[0] == attempts.CoveredValue
}

// markedRequest is a request and its mark's value, in one allocation.
type markedRequest struct {
	r http.Request
	v [1]string
}

// httpCall is everything a hedged HTTP call allocates, in one allocation: the call's
// state, its event and the winner's body.
type httpCall struct {
	call     call[*http.Response]
	attempts httpAttempts
	event    Event
	body     cancelbody.Body
}

// httpCalls keeps the memory of hedged HTTP calls for reuse, as grpcCalls does for
// gRPC's, under the same rule ([call.reusable]). What the caller keeps of a call
// lives elsewhere then: the winner's body is wrapped on its own, and the primary's
// request (the response's Request), with its mark, is a copy of its own.
var httpCalls = sync.Pool{New: func() any { return new(httpCall) }}

// release zeroes hc and puts it back, keeping its fireFunc and, made outside any
// testing/synctest bubble, its stopped timer (see [grpcCall.release]).
func (hc *httpCall) release() {
	k := hc.call.keep()
	*hc = httpCall{}
	hc.call.restore(k)
	httpCalls.Put(hc)
}

// hedged sends req, hedged as p says; keyedWrite: req is a write with an
// idempotency key (every copy is marked covered); mark: the primary carries the
// chain rule's mark.
func (t *transport) hedged(ctx context.Context, req *http.Request, target string, p plan, keyedWrite, mark bool) (*http.Response, error) {
	hc := httpCalls.Get().(*httpCall)
	hc.event = Event{Target: target, Attempts: 1, Delay: p.delay}
	hc.attempts = httpAttempts{t: t, req: req, getBody: req.GetBody, hasBody: hasBody(req), keyed: idempotency.Keyed(req.Header[idempotency.Header]), keyedWrite: keyedWrite,
		markPrimary: mark && !marked(req.Header)}
	hc.call.callSetup = callSetup[*http.Response]{hedger: t.h, protocol: record.HTTP, plan: p, adapter: &hc.attempts, event: &hc.event}
	r, cancel, ok := hc.call.run(ctx)
	if !ok {
		t.observe(ctx, &hc.event, nil)
		return nil, ctx.Err()
	}
	resp, err := r.value, r.err
	reuse := hc.call.reusable
	switch {
	case err != nil || resp == nil || resp.Body == nil || resp.Body == http.NoBody:
		cancel()
	case reuse || isWriter(resp.Body):
		// A 101 Switching Protocols answer: its body is the connection, and keeps
		// its Write.
		resp.Body = cancelbody.Wrap(resp.Body, cancel)
	default:
		hc.body = cancelbody.Body{ReadCloser: resp.Body, Cancel: cancel}
		resp.Body = &hc.body
	}
	t.observe(ctx, &hc.event, resp)
	if reuse {
		hc.release()
	}
	return resp, err
}

func isWriter(body io.ReadCloser) bool {
	_, ok := body.(io.Writer)
	return ok
}

// observe calls the observers with ev. resp is the answer the caller is about to
// get: when an observer panics, resp's body is closed (for a hedged call, that also
// cancels its attempt) before the panic goes on, so that a caller who recovers from
// it leaks no connection.
func (t *transport) observe(ctx context.Context, ev *Event, resp *http.Response) {
	if len(t.h.cfg.observers) == 0 {
		return
	}
	observed := false
	defer func() {
		if !observed && resp != nil && resp.Body != nil {
			_ = resp.Body.Close()
		}
	}()
	t.h.observe(ctx, ev)
	observed = true
}

// httpAttempts sends the copies of one request.
type httpAttempts struct {
	t       *transport
	req     *http.Request
	hasBody bool
	keyed   bool // the request carries an Idempotency-Key: see httpDedupConflict
	// keyedWrite: the request is a write, hedged for its key ([WithKeyedWrites]).
	keyedWrite bool
	// markPrimary: the primary's copy of the request gets the chain rule's mark
	// (req has none).
	markPrimary bool
	// derived: the primary's context has the deadline the propagate transport
	// below would derive (primaryContext).
	derived bool
	// getBody is the caller's req.GetBody, read on the caller's goroutine.
	getBody func() (io.ReadCloser, error)
	// The body of each hedge, from GetBody; element n is used by attempt n only.
	bodies [MaxAttempts]io.ReadCloser
	// The request of each hedge, made by ready; element n is used by attempt n only.
	hedges [MaxAttempts]*http.Request
}

func (p *httpAttempts) prepare(n int) error {
	if !p.hasBody {
		return nil
	}
	body, err := p.getBody()
	if err != nil {
		return &replayError{err}
	}
	p.bodies[n] = body
	return nil
}

func (p *httpAttempts) abandon(n int) {
	if b := p.bodies[n]; b != nil {
		p.bodies[n] = nil
		_ = b.Close()
	}
}

// primaryContext returns the primary's context and its cancel: the child of ctx
// with the shortened deadline the propagate transport below would derive for it,
// when it would, so that the attempt runs under one context of its own, not two;
// else a cancellable child of ctx.
func (p *httpAttempts) primaryContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if p.t.next != nil {
		if child, cancel, ok := p.t.next.DeriveAttempt(ctx); ok {
			p.derived = true
			return child, cancel
		}
	}
	return context.WithCancel(ctx)
}

func (p *httpAttempts) send(ctx context.Context, n int, span record.Attempt) (*http.Response, error) {
	if n == 0 {
		r, owned := p.primary(ctx, span.Recording())
		return p.roundTrip(r, handoff.Attempt{Derived: p.derived, OwnsHeader: owned})
	}
	r := p.hedges[n]
	p.hedges[n] = nil
	// The downstream's span is a child of this attempt's span.
	record.InjectHTTP(ctx, r.Header)
	if p.hasBody {
		r.Body, p.bodies[n] = p.bodies[n], nil
	}
	return p.roundTrip(r, handoff.Attempt{OwnsHeader: true})
}

// ready makes hedge n's request under ctx, a deep copy of the caller's (its URL
// and header are its own) carrying the attempt count and the mark. It runs under
// the call's lock while the call is undecided ([readier]): the caller's request is
// not read once the call may have returned.
func (p *httpAttempts) ready(ctx context.Context, n int) {
	r := p.req.Clone(ctx)
	if r.Header == nil {
		r.Header = make(http.Header, 2)
	}
	// A layer above (retry) may have counted attempts already: add to its count.
	r.Header[attempts.Header] = []string{attempts.Format(attempts.Parse(p.req.Header.Get(attempts.Header)) + n)}
	if mark := p.t.h.cfg.markOf(n, p.keyedWrite); mark != "" {
		r.Header[attempts.CoveredHeader] = []string{mark}
	}
	p.hedges[n] = r
}

// roundTrip sends one copy through the base transport, handing the propagate
// transport what was done for it (a).
func (p *httpAttempts) roundTrip(r *http.Request, a handoff.Attempt) (*http.Response, error) {
	if p.t.next != nil {
		return p.t.next.RoundTripAttempt(r, a)
	}
	return p.t.base.RoundTrip(r)
}

// primary returns the primary's copy of the request, under ctx: with a header map
// of its own (owned) when it gets the chain rule's mark, or the trace context of
// its attempt span (traced), so that the downstream's span is that span's child.
// The mark's value is allocated with the copy, which the caller keeps (the
// response's Request) after the call's state is reused. The map has room for
// what the propagate transport below writes into it.
func (p *httpAttempts) primary(ctx context.Context, traced bool) (r *http.Request, owned bool) {
	const room = 3 + 3 // propagate's headers; the mark, the trace context
	if !p.markPrimary {
		r := p.req.WithContext(ctx)
		if traced {
			r.Header = make(http.Header, len(p.req.Header)+room)
			maps.Copy(r.Header, p.req.Header)
			record.InjectHTTP(ctx, r.Header)
		}
		return r, traced
	}
	m := &markedRequest{r: *p.req.WithContext(ctx), v: [1]string{attempts.CoveredValue}}
	m.r.Header = make(http.Header, len(p.req.Header)+room)
	maps.Copy(m.r.Header, p.req.Header)
	m.r.Header[attempts.CoveredHeader] = m.v[:]
	if traced {
		record.InjectHTTP(ctx, m.r.Header)
	}
	return &m.r, true
}

// verdict is httpVerdict, but for a copy of a keyed request that the server's
// deduplication refused (httpDedupConflict): another copy holds the key and brings
// the answer.
func (p *httpAttempts) verdict(_ int, resp *http.Response, err error) verdict {
	if err == nil && p.keyed && httpDedupConflict(resp) {
		return refused
	}
	return httpVerdict(p.t.h.cfg, resp, err)
}

func (p *httpAttempts) failure(resp *http.Response, err error) error {
	if err == nil && resp != nil {
		return record.StatusError(resp.StatusCode)
	}
	return err
}

// httpVerdict classifies an HTTP attempt's outcome. A local refusal (propagate's
// floor, a body that could not be replayed) and a failure status carrying
// grpc-retry-pushback-ms with a negative value (a server's refusal for lack of
// budget, or a downstream that already retried) are refusals; a dial error and the
// non-fatal statuses fire the next hedge; 5xx, 408, 429 and other transport errors
// are this copy's failures; other 4xx are answers.
func httpVerdict(c *config, resp *http.Response, err error) verdict {
	if err != nil {
		var op *net.OpError
		var re *replayError
		switch {
		case errors.Is(err, deadline.ErrInsufficientBudget), errors.As(err, &re):
			return refused
		case errors.As(err, &op) && op.Op == "dial":
			return nonFatal
		}
		return failure
	}
	if resp == nil {
		return failure
	}
	v := answer
	switch code := resp.StatusCode; {
	case slices.Contains(c.nonFatalHTTP, code):
		v = nonFatal
	case code < 400:
		return success
	case code >= 500, code == http.StatusRequestTimeout, code == http.StatusTooManyRequests:
		v = failure
	}
	if v != answer && pushback.Refuses(resp.Header.Get(pushback.Key)) {
		return refused
	}
	return v
}

// discard drains and closes a loser's body on a goroutine of its own (internal/drain
// bounds the time and bytes), then cancels its context.
func (p *httpAttempts) discard(resp *http.Response, _ error, cancel context.CancelFunc) {
	if resp == nil || resp.Body == nil {
		cancel()
		return
	}
	go drain.Close(resp.Body, cancel)
}

// replayError is a hedge that could not get a body of its own.
type replayError struct{ err error }

func (e *replayError) Error() string { return "hedge: replaying the request body: " + e.err.Error() }
func (e *replayError) Unwrap() error { return e.err }
