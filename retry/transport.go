package retry

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/deadlinekit/deadlinekit/internal/attempts"
	"github.com/deadlinekit/deadlinekit/internal/cancelbody"
	"github.com/deadlinekit/deadlinekit/internal/drain"
	"github.com/deadlinekit/deadlinekit/internal/idempotency"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/internal/record"
)

// httpAttempt is what the HTTP classification sees of one attempt.
type httpAttempt struct {
	req  *http.Request  // the caller's
	resp *http.Response // nil when err is set
	err  error
	// sent: the request's header was written before the failure, so the server may
	// have started its handler (a body cut off half-way does not prove it did not);
	// traced exactly (net/http/httptrace WroteHeaders) for requests whose
	// classification depends on it (neither idempotent nor keyed), for the others
	// false only when the connection could not be made.
	sent     bool
	hasKey   bool      // the request carries an Idempotency-Key that is not blank
	timedOut bool      // this layer's per-attempt timeout ended the attempt
	now      time.Time // when the attempt ended, for Retry-After dates
}

// classifyHTTP is the judgement of [NewTransport], as documented there; 1xx–4xx
// answers but the retried ones are Answered, other failures Failed. A Retryable
// answer carries the server's pushback: grpc-retry-pushback-ms if present, else
// Retry-After.
func classifyHTTP(a httpAttempt) decision {
	idem := a.hasKey || idempotency.Method(a.req.Method)
	if a.err != nil {
		if a.req.Context().Err() != nil {
			return decision{verdict: Failed, reason: "the call's context ended"}
		}
		if !a.timedOut && !transportFailure(a.err) {
			return decision{verdict: Failed, reason: "not a transport failure"}
		}
		if !a.sent {
			return decision{verdict: Retryable, reason: "connection failed before the request was sent"}
		}
		if idem {
			if a.timedOut {
				return decision{verdict: Retryable, reason: "per-attempt timeout"}
			}
			return decision{verdict: Retryable, reason: "transport failure after the request was sent"}
		}
		return decision{verdict: Failed, reason: "failed after the request was sent, and the request is neither idempotent nor keyed"}
	}
	if a.resp == nil {
		return decision{verdict: Failed, reason: "no response"}
	}
	code := a.resp.StatusCode
	switch {
	case code == http.StatusTooManyRequests || code == http.StatusRequestTimeout || code == http.StatusTooEarly:
		return httpPushback(a, decision{verdict: Retryable, reason: "status " + strconv.Itoa(code)})
	case code == http.StatusInternalServerError || code == http.StatusBadGateway ||
		code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout:
		if !idem {
			if pushback.Unprocessed(a.resp.Header.Values(pushback.UnprocessedKey)) {
				return httpPushback(a, decision{verdict: Retryable, reason: "status " + strconv.Itoa(code) + ", refused before the handler ran"})
			}
			return refusedByServer(decision{verdict: Failed, reason: "status " + strconv.Itoa(code) + ", and the request is neither idempotent nor keyed"},
				a.resp.Header.Values(pushback.Key))
		}
		return httpPushback(a, decision{verdict: Retryable, reason: "status " + strconv.Itoa(code)})
	case code >= 500:
		return decision{verdict: Failed, reason: "status " + strconv.Itoa(code)}
	case code == http.StatusConflict && a.hasKey:
		return dedupConflictHTTP(a)
	}
	return decision{verdict: Answered}
}

// dedupConflictHTTP judges a 409 on a keyed request: the server's deduplication
// (package dedup) saying the first request with this key still runs, and when to
// come back (a positive pushback: grpc-retry-pushback-ms or Retry-After). It is
// retried after that pushback, when the deadline allows, and then meets the first's
// stored answer. A 409 without a positive pushback is the application's conflict:
// Answered.
func dedupConflictHTTP(a httpAttempt) decision {
	now := a.now
	if now.IsZero() {
		now = time.Now()
	}
	if p, found, err := pushback.FromHTTP(a.resp.Header, now); found && err == nil && p > 0 {
		d := withPushback(decision{verdict: Retryable, reason: "status 409 on a keyed request: the first with its key still runs"}, p, nil)
		d.conflict = true
		return d
	}
	return decision{verdict: Answered}
}

func httpPushback(a httpAttempt, d decision) decision {
	now := a.now
	if now.IsZero() {
		now = time.Now()
	}
	h := a.resp.Header
	if p, found, err := pushback.FromHTTP(h, now); found {
		d = withPushback(d, p, err)
		d.doNotRetry = pushback.Refuses(h.Get(pushback.Key))
	}
	return d
}

// withPushbackMs gives d the pushback of a grpc-retry-pushback-ms value.
func withPushbackMs(d decision, v string) decision {
	p, err := pushback.ParseMs(v)
	d = withPushback(d, p, err)
	d.doNotRetry = pushback.Refuses(v)
	return d
}

// refusedByServer gives a failure that is not retried anyway the server's "do not
// retry" (grpc-retry-pushback-ms: -1), when it said so, so that the call's stop
// reason can say the server refused rather than the request was not retryable.
func refusedByServer(d decision, v []string) decision {
	if len(v) > 0 && pushback.Refuses(v[0]) {
		return withPushbackMs(d, v[0])
	}
	return d
}

func withPushback(d decision, p time.Duration, err error) decision {
	d.hasPushback = true
	if err != nil {
		d.pushback = -1
		d.reason += ": " + err.Error()
		return d
	}
	d.pushback = p
	return d
}

// transportFailure reports whether err is a network failure that another attempt
// may not meet, as opposed to a configuration or protocol error.
func transportFailure(err error) bool {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var certErr *tls.CertificateVerificationError
	if errors.As(err, &certErr) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, context.DeadlineExceeded)
}

// dialFailure reports whether err says the connection was never made.
func dialFailure(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// NewTransport returns an [http.RoundTripper] that retries failed attempts of a
// request through base (nil means [http.DefaultTransport]). One transport is one
// client: its calls share one [Budget] unless [WithBudget] says otherwise.
//
// An attempt is retried when another one may succeed and resending does no harm:
//
//   - a transport error before the request's header was written (refused, reset
//     before the header went out, a dial or handshake timeout), whatever the method:
//     the server cannot have acted on it;
//   - a transport error once the header was written (a reset while the body is
//     still being sent, a read timeout, the per-attempt timeout), or a 500, 502,
//     503 or 504, only for an idempotent method (RFC 9110: GET, HEAD, OPTIONS,
//     TRACE, PUT, DELETE) or a request carrying an Idempotency-Key
//     ([WithIdempotencyKeys]): the server may have read the header and started the
//     handler, and a timeout proves only that no answer arrived, not that nothing
//     was done; for any request when the server says its
//     handler did not run (deadlinekit-unprocessed: 1, as the toolkit's guard sends
//     with its refusals);
//   - 429, 408 and 425, whatever the method.
//
// Nothing else is: not a call whose context ended, an error that is not a transport
// failure (a TLS certificate that does not verify, a bad URL), another status, nor a
// request with a Body but no GetBody, which is sent once. [WithClassifier] changes
// this judgement. A 5xx that is not retried carries the server's "do not retry"
// (grpc-retry-pushback-ms: -1) into the call's stop reason, when it said so.
//
// The caller's request is never modified: each attempt after the first is a shallow
// copy with its own header map (grpc-previous-rpc-attempts, the idempotency key) and
// a fresh body from GetBody. The body of every response that is retried is read
// into memory and closed, within bounds (64 KiB, 100 ms), so that a body that stalls
// cannot hold the retry up.
//
// The response returned is the last one the server gave, whatever its status, with
// a nil error: also when the layer stops before its attempts ran out (the deadline
// rule, the retry budget, a pushback over the cap, the caller's context ending
// during the wait before a retry, whose response was kept in memory with its body).
// Why it stopped is on the call's span (deadlinekit.retry.stop_reason) and in the
// last [Event] (Action [Stop], Err a [*StopError] wrapping a [*StatusError]). A
// [*StopError] is returned only when there is no response to return: the last
// attempt failed without one, or the response waited on had a body beyond the bounds
// or cut short (its Unkept field is then set).
//
// On a traced call, the spans say what a deduping server (package dedup) answered a
// keyed request: each attempt's span and the call's carry deadlinekit.dedup.replayed,
// deadlinekit.dedup.conflict and the conflict's deadlinekit.dedup.come_back_ms, and
// the call's span deadlinekit.idempotency_key.hash (package otelattr), never the key.
// A request net/http sent again by itself (a replayable one whose reused connection
// closed before an answer) counts each copy in deadlinekit.attempt.transport_resends
// and in the call's deadlinekit.attempts.
func NewTransport(base http.RoundTripper, opts ...Option) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base, c: newConfig(opts)}
}

type transport struct {
	base http.RoundTripper
	c    *config
}

// CloseIdleConnections closes the idle connections of the base transport when it has
// any, so that [http.Client.CloseIdleConnections] reaches it through this layer.
func (t *transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// sentTrace learns whether the request's header was written. Once it was, the
// server may have started the handler, however little of the body followed: only a
// failure before it proves the request was never sent. (A failure while the body is
// written is not "never sent": the server may have read the header and part of the
// body, run the handler and died.)
//
// It counts the headers written, too: net/http sends a replayable request (an
// idempotent method, or one carrying an Idempotency-Key) again by itself when the
// reused connection it went out on closes before an answer, writing its header
// once more within the one RoundTrip; each copy may have run.
//
// It holds the trace that counts them: one allocation for both.
type sentTrace struct {
	wrote atomic.Int32
	trace httptrace.ClientTrace
}

func (s *sentTrace) wroteHeaders() { s.wrote.Add(1) }

// sent reports whether a header was written.
func (s *sentTrace) sent() bool { return s.wrote.Load() > 0 }

// writes is how many times a header of the request was written: more than one when
// net/http sent it again, or a hedging layer beneath sent copies.
func (s *sentTrace) writes() int { return int(s.wrote.Load()) }

// RoundTrip sends req through the retry layer. The call's span ([record.StartCall])
// is started here when no layer above has one, and ends with the answer's body, or
// at once when a callback of the user's (an observer, the classifier) panics.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, call := record.StartCall(req.Context(), record.HTTP, req.Method)
	return call.RoundTripHTTP(func() (*http.Response, error) { return t.roundTrip(ctx, req) })
}

// roundTrip is RoundTrip under ctx, the call's context.
func (t *transport) roundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	c := t.c
	l := loop[httpResult, httpCall]{c: c, proto: record.HTTP, method: req.Method}
	l.begin(ctx)
	h := httpCall{c: c, base: t.base, req: req, idem: idempotency.Method(req.Method)}
	h.hasBody = req.Body != nil && req.Body != http.NoBody
	if h.hasBody && req.GetBody == nil {
		l.cut(record.StopNotRetryable)
	}
	vs := req.Header.Values(idempotency.Header)
	h.hasKey = idempotency.Keyed(vs)
	if h.hasKey || !h.idem { // safe and idempotent methods get no key
		if h.key = c.callKey(ctx, vs, !h.idem); h.key != "" {
			h.hasKey = true
		}
	}
	if h.key != "" {
		record.IdempotencyKey(ctx, h.key)
	} else if h.hasKey {
		record.IdempotencyKey(ctx, vs[0])
	}
	h.traceSent = l.max > 1 && !h.idem && !h.hasKey
	l.p = h
	v, err := l.run(ctx)
	return v.resp, err
}

// httpCall is the HTTP adapter of one call: what each attempt is made from.
type httpCall struct {
	c         *config
	base      http.RoundTripper
	req       *http.Request // the caller's, never modified
	key       string        // the idempotency key generated for the call, if any
	hasKey    bool          // the call carries a key (the caller's or key)
	idem      bool          // the method is idempotent
	hasBody   bool
	traceSent bool // whether the request's header was written decides its classification
}

// httpResult is what an HTTP attempt returns besides its error.
type httpResult struct {
	resp *http.Response // nil when the attempt failed
	sent *sentTrace     // when traceSent, or the call is traced
}

func (h httpCall) send(actx context.Context, n int, traced bool) (v httpResult, err error, ok bool) {
	// Traced calls of requests net/http may resend count the resends too.
	if h.traceSent || (traced && (h.idem || h.hasKey)) {
		v.sent = new(sentTrace)
		v.sent.trace.WroteHeaders = v.sent.wroteHeaders
		actx = httptrace.WithClientTrace(actx, &v.sent.trace)
	}
	r, err := h.request(actx, n, traced)
	if err != nil {
		return v, err, false
	}
	v.resp, err = h.base.RoundTrip(r)
	if err != nil && v.resp != nil {
		drainClose(v.resp, nil)
		v.resp = nil
	}
	return v, err, true
}

// request returns the request of attempt n under actx: the caller's own when nothing
// differs, else a copy with a header of its own (grpc-previous-rpc-attempts, the
// idempotency key, the attempt span's trace context) and, after the first, a fresh
// body.
func (h httpCall) request(actx context.Context, n int, traced bool) (*http.Request, error) {
	req := h.req
	if n == 1 && h.key == "" && actx == req.Context() {
		return req, nil
	}
	r := req.WithContext(actx)
	if n > 1 || h.key != "" || traced {
		r.Header = req.Header.Clone()
		if r.Header == nil {
			r.Header = make(http.Header)
		}
		record.InjectHTTP(actx, r.Header)
		if h.key != "" {
			r.Header.Set(idempotency.Header, h.key)
		}
		if n > 1 {
			r.Header.Set(attempts.Key, attempts.Format(n-1))
		}
	}
	if n > 1 && h.hasBody {
		body, err := getBody(req)
		if err != nil {
			return nil, fmt.Errorf("cannot replay the request body: %w", err)
		}
		r.Body = body
	}
	return r, nil
}

func (httpCall) replied(v httpResult) bool { return v.resp != nil }

func (h httpCall) judge(_ context.Context, v httpResult, err error, timedOut bool) outcome {
	resp := v.resp
	a := httpAttempt{req: h.req, resp: resp, err: err, hasKey: h.hasKey, timedOut: timedOut}
	if err != nil || resp == nil || resp.StatusCode >= 400 {
		a.now = time.Now() // for a Retry-After date
	}
	if err != nil {
		if v.sent != nil {
			a.sent = v.sent.sent()
		} else {
			a.sent = !dialFailure(err)
		}
	}
	return outcome{d: classifyHTTP(a), err: attemptErr(resp, err), idempotent: h.idem || h.hasKey}
}

func (httpCall) discard(v httpResult, cancel context.CancelFunc) {
	drainClose(v.resp, cancel)
	if cancel != nil {
		cancel()
	}
}

func (httpCall) deliver(v httpResult, err error, cancel context.CancelFunc) (httpResult, error) {
	v.resp, err = finish(v.resp, err, cancel)
	return v, err
}

func (httpCall) stopped(_ context.Context, err error) error { return err }

func (httpCall) answered(v httpResult) bool { return v.resp != nil }

func (httpCall) writes(v httpResult) int {
	if v.sent == nil {
		return 0
	}
	return v.sent.writes()
}

// dedup reads what a deduping server said of a keyed call's attempt: its replay
// marker (Idempotent-Replayed: true), a conflict (d.conflict).
func (h httpCall) dedup(_ context.Context, v httpResult, d decision) (record.DedupAnswer, bool) {
	if !h.hasKey || v.resp == nil {
		return record.DedupAnswer{}, false
	}
	a := record.DedupAnswer{Replayed: v.resp.Header.Get(idempotency.ReplayedHeader) == "true", Conflict: d.conflict}
	if d.conflict {
		a.ComeBack = d.pushback
	}
	return a, true
}

// keep reads the body of a response about to be retried into memory, within the
// bounds of package drain (64 KiB, 100 ms), so that the call can return it, body
// and all, should it stop before another attempt is sent. A body larger or slower
// than that is cut off, its connection dropped, and the response not kept.
func (httpCall) keep(v httpResult, cancel context.CancelFunc) (httpResult, bool) {
	resp := v.resp
	if resp.Body == nil || resp.Body == http.NoBody {
		if cancel != nil {
			cancel()
		}
		return v, true
	}
	body := safeClose{resp.Body}
	var cut atomic.Bool
	end := sync.OnceFunc(func() {
		_ = body.Close()
		if cancel != nil {
			cancel()
		}
	})
	t := time.AfterFunc(drain.Timeout, func() { cut.Store(true); end() })
	b, err := io.ReadAll(io.LimitReader(body, drain.Limit+1))
	t.Stop()
	end()
	if err != nil || cut.Load() || len(b) > drain.Limit {
		return httpResult{}, false
	}
	kept := *resp
	kept.Body = io.NopCloser(bytes.NewReader(b))
	return httpResult{resp: &kept}, true
}

func getBody(req *http.Request) (body io.ReadCloser, err error) {
	body, err = req.GetBody()
	if err == nil && body == nil {
		body = http.NoBody
	}
	return body, err
}

func attemptErr(resp *http.Response, err error) error {
	if err != nil || resp == nil || resp.StatusCode < 400 {
		return err
	}
	return &StatusError{StatusCode: resp.StatusCode, Status: resp.Status, Header: resp.Header}
}

// finish hands the attempt's result to the caller. The per-attempt context must live
// as long as the response body is read, so it is cancelled when the body is closed.
func finish(resp *http.Response, err error, cancel context.CancelFunc) (*http.Response, error) {
	if cancel == nil {
		return resp, err
	}
	if resp == nil || resp.Body == nil {
		cancel()
		return resp, err
	}
	resp.Body = cancelbody.Wrap(resp.Body, cancel)
	return resp, err
}

// drainClose disposes of the body of a response that is not returned, within the
// bounds of package drain, so that a retry is not held up by a body that stalls.
// cancel, when not nil, is the attempt's context's. The body's Close may run on a
// timer's goroutine (the bound on time), where a panic would end the process: there
// it is recovered (the error of a discarded body has nobody to go to).
func drainClose(resp *http.Response, cancel context.CancelFunc) {
	if resp == nil || resp.Body == nil {
		return
	}
	drain.Close(safeClose{resp.Body}, cancel)
}

// safeClose is a body whose Close turns a panic into an error.
type safeClose struct{ io.ReadCloser }

func (b safeClose) Close() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("retry: the response body's Close panicked: %v", r)
		}
	}()
	return b.ReadCloser.Close()
}
