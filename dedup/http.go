package dedup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/idempotency"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

// ReplayedHeader marks an answer as the stored answer of the first request with its
// key.
const ReplayedHeader = "Idempotent-Replayed"

// statusClientClosedRequest answers a request whose caller left while it waited
// (nginx's 499): nobody reads it.
const statusClientClosedRequest = 499

// NewMiddleware returns HTTP middleware that deduplicates requests carrying an
// Idempotency-Key on store, as the package documentation says: the first runs next
// and its answer is stored, repeats get that answer with Idempotent-Replayed: true.
// A request without the header goes to next untouched. The deadline must already be
// on the request's context (package propagate outside this one). It panics if store
// is nil.
func NewMiddleware(store Store, opts ...Option) func(http.Handler) http.Handler {
	if store == nil {
		panic("dedup: NewMiddleware with a nil Store")
	}
	c := &core{store: store, c: newConfig(opts)}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			vs, ok := r.Header[idempotency.Header]
			if !ok {
				next.ServeHTTP(w, r)
				return
			}
			c.serveHTTP(w, r, vs, next)
		})
	}
}

var errBodyTooLarge = errors.New("request body too large")

func (c *core) serveHTTP(w http.ResponseWriter, r *http.Request, vs []string, next http.Handler) {
	ctx := r.Context()
	key, err := ParseKey(vs)
	if err != nil {
		c.report(ctx, outMalformed, nil)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	t := &ticket{key: c.storeKey(ctx, key)}
	body, err := c.fingerprintHTTP(r, t)
	if err != nil {
		c.report(ctx, outMalformed, nil)
		if errors.Is(err, errBodyTooLarge) {
			http.Error(w, "dedup: the body of a request with an Idempotency-Key is above "+strconv.FormatInt(c.c.maxRequest, 10)+" bytes", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "dedup: reading the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	switch c.begin(ctx, t) {
	case vRun:
		c.runHTTP(w, r, body, t, c.workHTTP(r, t, next))
	case vReplay:
		c.replayHTTP(w, ctx, t)
	case vConflict:
		c.report(ctx, outConflict, t)
		h := w.Header()
		h.Set(pushback.Key, pushbackMs(t.comeBack))
		h.Set("Retry-After", retryAfter(t.comeBack))
		http.Error(w, "dedup: the first request with this Idempotency-Key is still being processed; come back in "+deadline.Format(t.comeBack), http.StatusConflict)
	case vMismatch:
		c.report(ctx, outMismatch, t)
		http.Error(w, "dedup: this Idempotency-Key was used for a different request (method, path or body differ)", http.StatusUnprocessableEntity)
	case vUnavailable:
		c.report(ctx, outUnavailable, t)
		if c.c.runWithoutStore {
			r.Body = body
			c.workHTTP(r, t, next).ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set(pushback.Key, pushbackMs(c.c.storeRetryAfter))
		h.Set("Retry-After", retryAfter(c.c.storeRetryAfter))
		http.Error(w, "dedup: the idempotency store cannot be reached: "+t.err.Error(), http.StatusServiceUnavailable)
	case vCanceled:
		c.report(ctx, outCanceled, t)
		w.Header().Set(pushback.Key, pushback.DoNotRetry)
		http.Error(w, "dedup: the caller left while the request waited for the first with its key", statusClientClosedRequest)
	}
}

// fingerprintHTTP sets t.fp from the method, the path with its query, and the body,
// which it reads (at most the limit) and returns to be read again.
func (c *core) fingerprintHTTP(r *http.Request, t *ticket) (io.ReadCloser, error) {
	h := sha256.New()
	h.Write([]byte(r.Method))
	h.Write([]byte{0})
	h.Write([]byte(r.URL.EscapedPath()))
	h.Write([]byte{'?'})
	h.Write([]byte(r.URL.RawQuery))
	h.Write([]byte{0})
	body := r.Body
	if body != nil && body != http.NoBody {
		b, err := readBody(r.Body, r.ContentLength, c.c.maxRequest)
		if err != nil {
			return nil, err
		}
		h.Write(b)
		body = &bodyReader{b: b}
	}
	var sum [sha256.Size]byte
	t.fp = hex.EncodeToString(h.Sum(sum[:0]))
	return body, nil
}

// readBody reads at most limit bytes of r (and one more, to tell a larger body):
// into one buffer of the declared length when it is known and within the limit.
func readBody(r io.Reader, declared, limit int64) ([]byte, error) {
	if declared > limit {
		return nil, errBodyTooLarge
	}
	if declared >= 0 {
		b := make([]byte, declared, declared+1)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		// Content-Length is what the server read by; a body longer than it is the
		// server's to refuse, not ours.
		return b, nil
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(r, limit+1)); err != nil {
		return nil, err
	}
	if int64(buf.Len()) > limit {
		return nil, errBodyTooLarge
	}
	return buf.Bytes(), nil
}

// bodyReader gives the handler the body that was read.
type bodyReader struct {
	b []byte
	i int
}

func (r *bodyReader) Read(p []byte) (int, error) {
	if r.i >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.i:])
	r.i += n
	return n, nil
}

func (r *bodyReader) Close() error { return nil }

func (c *core) runHTTP(w http.ResponseWriter, r *http.Request, body io.ReadCloser, t *ticket, next http.Handler) {
	ctx := r.Context()
	rec := &recorder{ResponseWriter: w, max: c.c.maxResponse}
	r2 := r.WithContext(context.WithValue(ctx, runKey{}, t))
	r2.Body = body
	completed := false
	defer func() {
		if !completed { // a panic, or runtime.Goexit: it goes on unchanged
			c.release(ctx, t)
			c.report(ctx, outReleased, t)
		}
	}()
	next.ServeHTTP(rec, r2)
	completed = true
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	if t.forgot.Load() || status == statusClientClosedRequest || status == http.StatusGatewayTimeout || comeBackHTTP(status, rec.Header()) ||
		(rec.status == 0 && ctx.Err() != nil) {
		c.release(ctx, t)
		c.report(ctx, outReleased, t)
		return
	}
	if rec.status == 0 {
		rec.snapshot(http.StatusOK)
	}
	size := rec.size
	if rec.over {
		c.complete(ctx, t, encodeNotKept(status, size), nil)
	} else {
		c.complete(ctx, t, rec.ans, func() []byte { return encodeNotKept(status, size) })
	}
	c.report(ctx, outFirst, t)
}

func (c *core) replayHTTP(w http.ResponseWriter, ctx context.Context, t *ticket) {
	out := outReplayed
	if t.waited > 0 {
		out = outWaited
	}
	if len(t.answer) > 0 && t.answer[0] == kindHTTP {
		// The common case, decoded straight into the response's header.
		h := w.Header()
		status, body, err := decodeHTTPInto(t.answer, h)
		if err == nil {
			c.report(ctx, out, t)
			h[ReplayedHeader] = []string{"true"} // its own: the header goes on to the layers outside
			w.WriteHeader(status)
			_, _ = w.Write(body)
			return
		}
		clear(h)
	}
	a, err := decodeAnswer(t.answer)
	switch a := a.(type) {
	case *notKept:
		c.report(ctx, outNotKept, t)
		w.Header().Set(ReplayedHeader, "true")
		http.Error(w, "dedup: the first request with this Idempotency-Key completed with status "+strconv.Itoa(a.status)+
			", but its answer ("+strconv.Itoa(a.size)+" bytes) was above the size limit and was not kept", http.StatusGone)
	case *grpcAnswer:
		c.report(ctx, outMismatch, t)
		http.Error(w, "dedup: this Idempotency-Key was used for a different request (a gRPC call)", http.StatusUnprocessableEntity)
	default:
		t.err = err
		c.report(ctx, outUnavailable, t)
		http.Error(w, "dedup: the stored answer for this Idempotency-Key cannot be read: "+err.Error(), http.StatusInternalServerError)
	}
}

// notStored are the headers a stored answer leaves out: they describe one
// connection or one moment, not the answer.
var notStored = map[string]bool{
	"Date": true, "Connection": true, "Keep-Alive": true, "Transfer-Encoding": true,
	"Trailer": true, "Upgrade": true, "Proxy-Connection": true,
}

// recorder passes the answer through and keeps it, encoded, up to the limit.
type recorder struct {
	http.ResponseWriter
	max    int
	status int    // 0 until the header is written
	ans    []byte // the stored answer: status and header, then the body written so far
	size   int    // the body's size
	over   bool   // the body passed the limit: ans is nil
}

// snapshot starts the stored answer with the status and the header as they are sent.
func (w *recorder) snapshot(code int) {
	w.status = code
	w.ans = appendHTTPHead(make([]byte, 0, 256), code, w.ResponseWriter.Header())
}

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.snapshot(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.snapshot(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(b)
	w.size += n
	if !w.over {
		if w.size > w.max {
			w.over, w.ans = true, nil
		} else {
			w.ans = append(w.ans, b[:n]...)
		}
	}
	return n, err
}

// Flush flushes the underlying writer when it can.
func (w *recorder) Flush() {
	if w.status == 0 {
		w.snapshot(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets [http.ResponseController] reach the underlying writer.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }
