package hedge

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/deadlinekit/deadlinekit/internal/cancelbody"
	"github.com/deadlinekit/deadlinekit/otelattr"
)

// Header names the HTTP adapter reads and writes.
const (
	// HeaderPreviousAttempts is sent on every hedge with the number of copies of the
	// call sent before it (gRPC A6's grpc-previous-rpc-attempts).
	HeaderPreviousAttempts = "Grpc-Previous-Rpc-Attempts"
	// HeaderIdempotencyKey makes any request hedgeable, whatever its method.
	HeaderIdempotencyKey = "Idempotency-Key"
)

// Bounds of the disposal of a loser's response body.
const (
	drainMax     = 64 << 10
	drainTimeout = 100 * time.Millisecond
)

// NewTransport returns an http.RoundTripper that hedges idempotent requests after the
// observed latency percentile of their host, with a [Hedger] of its own made from
// opts. A nil base means http.DefaultTransport. Use [New] and [Hedger.Transport] to
// read the statistics or share the state with other adapters.
func NewTransport(base http.RoundTripper, opts ...Option) http.RoundTripper {
	return New(opts...).Transport(base)
}

// Transport returns an http.RoundTripper that hedges idempotent requests sent
// through base (nil: http.DefaultTransport), with h's state.
//
// Requests with method GET, HEAD, OPTIONS, TRACE, PUT or DELETE, or with an
// Idempotency-Key header, are hedged; when they have a body, only if GetBody can
// replay it, every attempt getting its own body. Other requests are sent once through
// base, unchanged. Each hedge is a copy of the request with its own context and
// header map, carrying Grpc-Previous-Rpc-Attempts; the caller's request is never
// modified. The winner's context lives until its response body is closed or read to
// the end; losers are cancelled and their bodies drained (64 KiB, 100 ms at most) and
// closed.
func (h *Hedger) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{h: h, base: base}
}

type transport struct {
	h    *Hedger
	base http.RoundTripper
}

// CloseIdleConnections closes the idle connections of the base transport, when it
// has any (http.Client.CloseIdleConnections calls it).
func (t *transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// IdempotentRequest reports whether the hedging layer may send req more than once:
// its method is safe or idempotent (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) or it
// carries an Idempotency-Key header. It does not look at the body.
func IdempotentRequest(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	vs := req.Header[HeaderIdempotencyKey]
	return len(vs) > 0 && strings.TrimSpace(vs[0]) != ""
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	h := t.h
	ctx := req.Context()
	ev := Event{Target: req.Host, Attempts: 1}
	if req.URL == nil {
		return t.base.RoundTrip(req) // let the base transport refuse it
	}
	if req.URL.Host != "" {
		ev.Target = req.URL.Host
	}
	hasBody := req.Body != nil && req.Body != http.NoBody
	switch {
	case !IdempotentRequest(req):
		h.notIdempotent.Add(1)
		ev.Skipped = SkipNotIdempotent
	case hasBody && req.GetBody == nil:
		h.notReplayable.Add(1)
		ev.Skipped = SkipNotReplayable
	}
	if ev.Skipped != SkipNone {
		resp, err := t.base.RoundTrip(req)
		h.observe(ctx, &ev)
		return resp, err
	}

	h.primaries.Add(1)
	h.tokens.pay()
	w := h.window(h.target(ev.Target, false))
	start := time.Now()
	delay, ok := h.delay(w, start)
	if !ok || h.cfg.maxAttempts < 2 || h.cfg.maxExtraLoad <= 0 {
		if !ok {
			ev.Skipped = SkipWarmingUp
		}
		resp, err := t.base.RoundTrip(req)
		if w != nil && httpVerdict(h.cfg, resp, err) == success {
			end := time.Now()
			w.Add(end, end.Sub(start))
		}
		otelattr.RecordHedgeCall(ctx, 0, false, otelattr.HedgeSkipWarmingUp)
		h.observe(ctx, &ev)
		return resp, err
	}

	// One allocation for the call's state, its event and the winner's body.
	hc := &httpCall{ev: Event{Target: ev.Target, Attempts: 1, Delay: delay}}
	hc.p = httpAttempts{t: t, req: req, hasBody: hasBody}
	a, cancel, won := hedged(&hc.c, h, ctx, otelattr.HTTP, w, &hc.p, start, delay, &hc.ev)
	h.observe(ctx, &hc.ev)
	if !won {
		return nil, ctx.Err()
	}
	resp, err := a.v, a.err
	if err != nil || resp == nil || resp.Body == nil || resp.Body == http.NoBody {
		cancel()
		return resp, err
	}
	hc.body = cancelbody.Body{ReadCloser: resp.Body, Cancel: cancel}
	resp.Body = &hc.body
	return resp, nil
}

// httpCall is everything a hedged HTTP call allocates.
type httpCall struct {
	c    call[*http.Response]
	p    httpAttempts
	ev   Event
	body cancelbody.Body
}

// httpAttempts sends the copies of one request.
type httpAttempts struct {
	t       *transport
	req     *http.Request
	hasBody bool
}

func (p *httpAttempts) send(ctx context.Context, n int, traced bool) (*http.Response, error) {
	r := p.req.WithContext(ctx)
	if n == 0 && !traced {
		return p.t.base.RoundTrip(r)
	}
	r.Header = p.req.Header.Clone()
	if r.Header == nil {
		r.Header = make(http.Header, 2)
	}
	// The downstream's span is a child of this attempt's span.
	otelattr.InjectHTTP(ctx, r.Header)
	if n == 0 {
		return p.t.base.RoundTrip(r)
	}
	// A layer above (retry) may have counted attempts already: add to its count.
	r.Header[HeaderPreviousAttempts] = []string{strconv.Itoa(previous(p.req.Header.Get(HeaderPreviousAttempts)) + n)}
	if p.hasBody {
		body, err := p.req.GetBody()
		if err != nil {
			// The hedge could not be built: let the primary decide the call.
			return nil, &replayError{err}
		}
		r.Body = body
	}
	return p.t.base.RoundTrip(r)
}

func (p *httpAttempts) verdict(resp *http.Response, err error) verdict {
	return httpVerdict(p.t.h.cfg, resp, err)
}

func httpVerdict(c *config, resp *http.Response, err error) verdict {
	if err != nil {
		var op *net.OpError
		var re *replayError
		if errors.As(err, &op) && op.Op == "dial" || errors.As(err, &re) {
			return nonFatal
		}
		return final
	}
	if resp == nil {
		return final
	}
	for _, code := range c.nonFatalHTTP {
		if resp.StatusCode == code {
			return nonFatal
		}
	}
	if resp.StatusCode < 400 {
		return success
	}
	return final
}

func (p *httpAttempts) discard(resp *http.Response, _ error, cancel context.CancelFunc) {
	if resp == nil || resp.Body == nil {
		cancel()
		return
	}
	go drain(resp.Body, cancel)
}

// drain reads a little of a loser's body, so that its connection can be reused, and
// closes it; it never waits long for a slow body: cancelling the attempt ends the
// read.
func drain(body io.ReadCloser, cancel context.CancelFunc) {
	t := time.AfterFunc(drainTimeout, cancel)
	_, _ = io.CopyN(io.Discard, body, drainMax)
	_ = body.Close()
	t.Stop()
	cancel()
}

// previous reads a grpc-previous-rpc-attempts value set above this layer; anything
// but a small non-negative number counts as none.
func previous(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 1000 {
		return 0
	}
	return n
}

// replayError is a hedge that could not get a body of its own.
type replayError struct{ err error }

func (e *replayError) Error() string { return "hedge: replaying the request body: " + e.err.Error() }
func (e *replayError) Unwrap() error { return e.err }
