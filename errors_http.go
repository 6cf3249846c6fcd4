package deadlinekit

// A failure on HTTP: written as an answer (WriteHTTPError), read back from one
// (FromHTTP).

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

// WriteHTTPError answers an HTTP request with err, before anything else was written:
// the status of [HTTPStatus], the message as a text/plain body, and the pushback as
// headers: grpc-retry-pushback-ms: -1 for "do not retry" (a refusal for lack of
// budget among others), Retry-After (whole seconds, rounded up) and
// grpc-retry-pushback-ms (milliseconds) for a wait; Retry-After alone beside a "do
// not retry" when the downstream named a wait (a relayed open circuit), so that each
// signal keeps its one value. A failure that came from a downstream (an open
// circuit, a transport error, a [*WireError] read by [FromHTTP] or [FromGRPC], also
// a downstream's 504 or 499, exhausted retries) carries deadlinekit-relayed: 1, which
// tells the caller's breaker that this server is up. This server's own timeout or
// cancellation does not: its context's error (also when it ended a call to a
// downstream), its retry layer's "no time for another attempt", its propagate
// layer's refusal to send. A nil err writes nothing.
//
// The message is err's own, except that a gRPC status gives its message without
// grpc-go's "rpc error: code = ... desc =" prefix, and that a bare
// [*deadline.BudgetError] or [*propagate.TimeoutError] takes this package's prefix,
// "deadlinekit: ". Under [WithEdge], the message is [Public]'s, and err goes on the
// request's span.
func WriteHTTPError(w http.ResponseWriter, err error) {
	if err == nil {
		return
	}
	x := toWire(err)
	if st := edgeOfWriter(w); st != nil {
		x.msg = publicText(err, x) // at the edge, Public's words
		st.record(err)
	}
	h := w.Header()
	switch {
	case x.pushback < 0:
		h.Set(pushback.Key, pushback.DoNotRetry)
	case x.pushback > 0:
		h.Set(pushback.Key, strconv.FormatInt(ceilDiv(x.pushback, time.Millisecond), 10))
	}
	if wait := comeBack(x.pushback, x.comeBack); wait > 0 {
		h.Set(pushback.RetryAfterKey, strconv.FormatInt(ceilDiv(wait, time.Second), 10))
	}
	if x.relayed {
		h.Set(pushback.RelayedKey, pushback.Yes)
	}
	http.Error(w, x.msg, x.status)
}

// FromHTTP returns the error an HTTP call's result stands for, taking the two results
// of [http.Client.Do] (or of a RoundTrip) as they come:
//
//	resp, err := client.Do(req)
//	if err := deadlinekit.FromHTTP(resp, err); err != nil {
//		return nil, deadlinekit.GRPCError(ctx, err)
//	}
//	defer resp.Body.Close()
//
// A transport error is returned unchanged. A status below 400 is a success: FromHTTP
// returns nil and leaves the body to the caller, who reads and closes it. Any other
// status gives a [*WireError]: the status, its gRPC code (see [GRPCError]), the body
// as the message when it is text (text/plain, JSON, or no Content-Type; at most 1 KiB
// kept), and the pushback from grpc-retry-pushback-ms, else Retry-After, read as
// package retry reads them (a negative or malformed value means "do not retry"). For
// a failure FromHTTP reads at most 4 KiB of the body and closes it: the caller must
// not use it. The read ends, at the latest, with the request's context.
//
// 504 with grpc-retry-pushback-ms: -1 (a guard's refusal) matches
// [deadline.ErrInsufficientBudget] and [context.DeadlineExceeded]; 504 alone only the
// latter; 499 matches [context.Canceled]; 503 [ErrUnavailable], and [ErrOverloaded]
// too with a pushback; 429 [ErrOverloaded]; 400 [ErrInvalidArgument].
func FromHTTP(resp *http.Response, err error) error {
	if err != nil {
		// net/http has already closed the body of a response that comes with an
		// error (a CheckRedirect failure).
		return err
	}
	if resp == nil {
		return errors.New("deadlinekit: no HTTP response and no error")
	}
	if resp.StatusCode >= 100 && resp.StatusCode < 400 {
		return nil
	}
	e := httpFailure(resp.StatusCode, resp.Header)
	e.Message = readMessage(resp)
	return e
}

// httpFailure is the relayed failure an HTTP answer with status s and header h
// stands for: the code and the signals FromHTTP reads, without the message.
func httpFailure(s int, h http.Header) *WireError {
	now := time.Now()
	e := &WireError{HTTPStatus: s, Pushback: httpPushback(h, now), relayed: true}
	if e.Pushback < 0 {
		e.RetryAfter = pushback.ComeBackHTTP(h, now)
	}
	e.Code = codeFromHTTP(s, e.Pushback)
	return e
}

// httpPushback reads an HTTP answer's pushback; negative for "do not retry".
func httpPushback(h http.Header, now time.Time) time.Duration {
	return pushbackOf(pushback.FromHTTP(h, now))
}

// Limits on what FromHTTP reads of a failure's body.
const (
	messageLimit = 1 << 10 // bytes kept as the message
	drainLimit   = 4 << 10 // bytes read, so that the connection can be reused
)

// readMessage reads a failure's body for its message and closes it.
func readMessage(resp *http.Response) string {
	if resp.Body == nil || resp.Body == http.NoBody {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, drainLimit))
	_ = resp.Body.Close()
	if !textual(resp.Header.Get("Content-Type")) {
		return ""
	}
	if len(b) > messageLimit {
		b = b[:messageLimit]
		// Drop the rune the cut split, rather than show it as U+FFFD.
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0; i++ {
			if r, size := utf8.DecodeLastRune(b); r != utf8.RuneError || size != 1 {
				break
			}
			b = b[:len(b)-1]
		}
	}
	// Each invalid byte becomes U+FFFD, three bytes: cut again, on a rune's start.
	text := strings.ToValidUTF8(string(b), "\uFFFD")
	if len(text) > messageLimit {
		cut := messageLimit
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut]
	}
	return strings.TrimSpace(text)
}

// textual reports whether a body of this Content-Type can serve as a message.
func textual(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "text/plain" || mt == "application/json" || mt == "application/problem+json"
}
