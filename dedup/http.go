package dedup

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

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

// httpRunning is what a keyed HTTP request that runs its handler needs, in one
// allocation (a replay needs none of it): its run's context, the body read for its
// fingerprint, the recorder of its answer and the request its handler gets. It is
// 480 bytes, the allocator's size class below 512: keep it within.
type httpRunning struct {
	run  runContext
	body bodyReader
	rec  recorder
	req  http.Request
}

// readBody is how fingerprintHTTP left a request's body.
type readBody uint8

const (
	bodyUntouched readBody = iota // none: the request's own (nil or http.NoBody)
	bodyWhole                     // read whole: the bytes
	bodyFirst                     // enveloped: the bytes are its first message, the rest is the request's
)

// handlerBody is the body the handler gets after fingerprintHTTP read b of r's
// body as how says; br is where a body read whole may be kept.
func handlerBody(r *http.Request, b []byte, how readBody, br *bodyReader) io.ReadCloser {
	switch how {
	case bodyWhole:
		*br = bodyReader{b: bytesString(b)}
		return br
	case bodyFirst:
		return &streamBody{first: bodyReader{b: bytesString(b)}, rest: r.Body}
	}
	return r.Body
}

func (c *core) serveHTTP(w http.ResponseWriter, r *http.Request, vs []string, next http.Handler) {
	ctx := r.Context()
	key, err := ParseKey(vs)
	if err != nil {
		c.report(ctx, outMalformed, nil)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	t := &ticket{inbound: key}
	b, how, err := c.fingerprintHTTP(r, t)
	switch {
	case err == nil:
	case senderLeft(ctx, err):
		c.report(ctx, outCanceled, nil)
		w.Header().Set(pushback.Key, pushback.DoNotRetry)
		http.Error(w, "dedup: the caller left while sending the body of its request: "+err.Error(), statusClientClosedRequest)
		return
	case errors.Is(err, errBodyTooLarge):
		c.report(ctx, outMalformed, nil)
		http.Error(w, "dedup: the body of a request with an Idempotency-Key is above "+strconv.FormatInt(c.c.maxRequest, 10)+" bytes", http.StatusRequestEntityTooLarge)
		return
	default:
		c.report(ctx, outMalformed, nil)
		http.Error(w, "dedup: reading the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	switch c.begin(ctx, t) {
	case vRun:
		c.runHTTP(w, r, b, how, t, next)
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
			r2 := r.WithContext(ctx) // a request of its own: the caller's keeps its body
			r2.Body = handlerBody(r, b, how, &bodyReader{})
			c.workHTTP(r2, nil, next).ServeHTTP(w, r2)
			return
		}
		// The store's failure, not this server's: the caller's breaker stays neutral.
		comeBack := c.storeDown(ctx, t.err)
		h := w.Header()
		h.Set(pushback.Key, pushbackMs(comeBack))
		h.Set("Retry-After", retryAfter(comeBack))
		h.Set(pushback.RelayedKey, pushback.Yes)
		http.Error(w, storeDownMessage(t.err, comeBack), http.StatusServiceUnavailable)
	case vCanceled:
		c.report(ctx, outCanceled, t)
		w.Header().Set(pushback.Key, pushback.DoNotRetry)
		http.Error(w, "dedup: the caller left before its Idempotency-Key was settled", statusClientClosedRequest)
	}
}

// fingerprintHTTP sets t.fp (and t.key, [core.setFingerprint]) from the method,
// the path with its query, and the body, which it reads (at most the limit) and
// returns, with how, for [handlerBody] to give it to the handler again. The body of
// a protocol that may stream its request ([enveloped]) is read only up to its
// first message: the rest goes to the handler as it comes, so that a client stream
// or a bidi stream is not held until the client ends it (a bidi client waits for an
// answer before it sends more).
func (c *core) fingerprintHTTP(r *http.Request, t *ticket) ([]byte, readBody, error) {
	h := sha256.New()
	h.Write([]byte(r.Method))
	h.Write([]byte{0})
	h.Write([]byte(r.URL.EscapedPath()))
	h.Write([]byte{'?'})
	h.Write([]byte(r.URL.RawQuery))
	h.Write([]byte{0})
	var b []byte
	how := bodyUntouched
	if body := r.Body; body != nil && body != http.NoBody {
		var err error
		if enveloped(r.Header.Get("Content-Type")) {
			b, how, err = readEnvelope(body, c.c.maxRequest)
		} else {
			b, how, err = readAll(body, r.ContentLength, c.c.maxRequest)
		}
		if err != nil {
			return nil, 0, err
		}
		h.Write(b)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	c.setFingerprint(r.Context(), t, &sum)
	return b, how, nil
}

// senderLeft reports whether err, reading a request's body, says that its sender
// went away before the whole body came (the connection ended early: the body's
// reader returns an unexpected EOF, or EOF before its first byte), or ctx ended:
// a caller that left, not a malformed request.
func senderLeft(ctx context.Context, err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || ctx.Err() != nil
}

// readAll reads at most limit bytes of r (and one more, to tell a larger body):
// into one buffer of the declared length when it is known and within the limit.
func readAll(r io.Reader, declared, limit int64) ([]byte, readBody, error) {
	if declared > limit {
		return nil, 0, errBodyTooLarge
	}
	if declared >= 0 {
		b := make([]byte, declared, declared+1)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, 0, err
		}
		// Content-Length is what the server read by; a body longer than it is the
		// server's to refuse, not ours.
		return b, bodyWhole, nil
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(r, limit+1)); err != nil {
		return nil, 0, err
	}
	if int64(buf.Len()) > limit {
		return nil, 0, errBodyTooLarge
	}
	return buf.Bytes(), bodyWhole, nil
}

// enveloped reports whether a request of content type ct frames its body as
// length-prefixed messages and may stream them: gRPC, gRPC-Web and Connect
// streaming. (gRPC-Web text is base64 and comes from browsers, which do not stream
// requests: it is read whole.)
func enveloped(ct string) bool {
	ct = strings.ToLower(ct)
	return !strings.HasPrefix(ct, "application/grpc-web-text") &&
		(strings.HasPrefix(ct, "application/grpc") || strings.HasPrefix(ct, "application/connect+"))
}

// readEnvelope reads the first message of an enveloped body: a flags byte, a 4-byte
// big-endian length and the message, at most limit bytes in all. An empty body
// has none.
func readEnvelope(r io.Reader, limit int64) ([]byte, readBody, error) {
	var prefix [5]byte
	if n, err := io.ReadFull(r, prefix[:]); n == 0 && err == io.EOF {
		return nil, bodyFirst, nil
	} else if err != nil {
		return nil, 0, err
	}
	size := int64(binary.BigEndian.Uint32(prefix[1:]))
	if 5+size > limit {
		return nil, 0, errBodyTooLarge
	}
	b := make([]byte, 5+size)
	copy(b, prefix[:])
	if _, err := io.ReadFull(r, b[5:]); err != nil {
		return nil, 0, err
	}
	return b, bodyFirst, nil
}

// streamBody gives the handler the first message that was read, then the rest of
// the body as it comes, and notes whether there was more: a request of several
// messages is a stream, which is not deduplicated (its key is released when the
// handler returns).
type streamBody struct {
	first bodyReader
	rest  io.ReadCloser
	more  atomic.Bool
}

func (s *streamBody) Read(p []byte) (int, error) {
	if s.first.i < len(s.first.b) {
		return s.first.Read(p)
	}
	n, err := s.rest.Read(p)
	if n > 0 {
		s.more.Store(true)
	}
	return n, err
}

func (s *streamBody) Close() error { return s.rest.Close() }

// bodyReader gives the handler the body that was read: bytes nothing writes again,
// as a string (a word smaller than a slice).
type bodyReader struct {
	b string
	i int
}

// bytesString is b as a string, without a copy: nothing may write b again.
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func (r *bodyReader) Read(p []byte) (int, error) {
	if r.i >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.i:])
	r.i += n
	return n, nil
}

func (r *bodyReader) Close() error { return nil }

func (c *core) runHTTP(w http.ResponseWriter, r *http.Request, b []byte, how readBody, t *ticket, next http.Handler) {
	ctx := r.Context()
	run := &httpRunning{rec: recorder{ResponseWriter: w, max: int32(min(c.c.maxResponse, math.MaxInt32))}}
	run.req = *r.WithContext(c.runCtx(ctx, t, &run.run)) // the copy WithContext makes stays on the stack
	rec, r2 := &run.rec, &run.req
	body := handlerBody(r, b, how, &run.body)
	r2.Body = body
	next = c.workHTTP(r, &run.run, next)
	completed := false
	defer func() {
		if !completed { // a panic, or runtime.Goexit: it goes on unchanged
			c.release(ctx, t)
			c.report(ctx, outReleased, t)
		}
	}()
	next.ServeHTTP(rec, r2)
	completed = true
	streamed := false
	if sb, ok := body.(*streamBody); ok {
		streamed = sb.more.Load()
	}
	status := int(rec.status)
	if status == 0 {
		status = http.StatusOK
	}
	// Released: nothing happened (Forget, 504, 499, the deadline before any answer),
	// the answer tells the caller to come back (not final), or there is no HTTP
	// answer to store (the connection was taken over), or the request was a stream
	// of several messages (not deduplicated).
	if run.run.forgot.Load() || status == statusClientClosedRequest || status == http.StatusGatewayTimeout || comeBackHTTP(status, rec.Header()) ||
		(rec.status == 0 && ctx.Err() != nil) || rec.upgraded || streamed {
		rec.seal()
		c.release(ctx, t)
		c.report(ctx, outReleased, t)
		return
	}
	if rec.status == 0 {
		rec.snapshot(http.StatusOK)
	}
	_, copies := c.store.(*MemoryStore) // it copies the answer before Complete returns
	ans, total, keepable := rec.answer(r.Method == http.MethodHead, copies)
	var notKept func() []byte // on the stack: complete does not keep it
	if keepable {
		notKept = func() []byte { return encodeNotKept(int(rec.status), total) }
	}
	c.complete(ctx, t, ans, notKept)
	rec.seal() // the answer lent to a store that copies it
	c.report(ctx, outFirst, t)
}

func (c *core) replayHTTP(w http.ResponseWriter, ctx context.Context, t *ticket) {
	out := outReplayed
	if t.waited > 0 {
		out = outWaited
	}
	if len(t.answer) > 0 && (t.answer[0] == kindHTTP || t.answer[0] == kindHTTPTrailers) {
		// The common case, decoded straight into the response's header.
		h := w.Header()
		status, trailer, body, err := decodeHTTPInto(t.answer, h)
		if err == nil {
			c.report(ctx, out, t)
			h[ReplayedHeader] = []string{"true"} // its own: the header goes on to the layers outside
			w.WriteHeader(status)
			_, _ = w.Write(body)
			if len(trailer) > 0 {
				// A handler that returns after one small write gets a Content-Length
				// from net/http, and over HTTP/1.1 no trailers: flushing first sends
				// the body chunked, with its trailers, as the first answer was.
				_ = http.NewResponseController(w).Flush()
			}
			setTrailers(h, trailer)
			return
		}
		clear(h)
	}
	a, err := decodeAnswer(t.answer)
	switch a := a.(type) {
	case *notKept:
		// A refusal, not the stored answer: it is not marked Idempotent-Replayed.
		c.report(ctx, outNotKept, t)
		msg := "dedup: the first request with this Idempotency-Key completed with status " + strconv.Itoa(a.status) + ", but its answer "
		if a.why == whyIncomplete {
			msg += "was not delivered in full (a write to its caller failed, or its body did not match its Content-Length) and was not kept"
		} else {
			msg += "(" + strconv.Itoa(a.size) + " bytes) was above the size limit and was not kept"
		}
		http.Error(w, msg, http.StatusGone)
	case *grpcAnswer:
		c.report(ctx, outMismatch, t)
		http.Error(w, "dedup: this Idempotency-Key was used for a different request (a gRPC call)", http.StatusUnprocessableEntity)
	default:
		t.err = err
		c.report(ctx, outUnavailable, t)
		http.Error(w, "dedup: the stored answer for this Idempotency-Key cannot be read: "+err.Error(), http.StatusInternalServerError)
	}
}

// setTrailers sets the stored trailers after the body, as the first request's
// handler did: a name the replayed Trailer header declares under its own name, any
// other with [http.TrailerPrefix].
func setTrailers(h, trailer http.Header) {
	if len(trailer) == 0 {
		return
	}
	declared := declaredTrailers(h)
	for k, vs := range trailer {
		if declared[k] {
			h[k] = vs
		} else {
			h[http.TrailerPrefix+k] = vs
		}
	}
}

// declaredTrailers returns the names the Trailer header of h declares, canonical.
func declaredTrailers(h http.Header) map[string]bool {
	var names map[string]bool
	for _, v := range h["Trailer"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				if names == nil {
					names = make(map[string]bool)
				}
				names[http.CanonicalHeaderKey(name)] = true
			}
		}
	}
	return names
}

// trailersOf returns the trailers the handler set in h, as net/http sends them:
// the names the Trailer header declares, and the keys with [http.TrailerPrefix].
func trailersOf(h http.Header) http.Header {
	var t http.Header
	add := func(k string, vs []string) {
		if len(vs) == 0 {
			return
		}
		if t == nil {
			t = make(http.Header)
		}
		t[k] = append(t[k], vs...)
	}
	for k, vs := range h {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			add(name, vs)
		}
	}
	for name := range declaredTrailers(h) {
		add(name, h[name])
	}
	return t
}

// notStored are the headers a stored answer leaves out: they describe one
// connection or one moment, not the answer. (Trailer, which declares the
// trailers, is stored: the replay sends the same trailers.)
var notStored = map[string]bool{
	"Date": true, "Connection": true, "Keep-Alive": true, "Transfer-Encoding": true,
	"Upgrade": true, "Proxy-Connection": true,
}

// recorder passes the answer through and keeps it, encoded, up to the limit. It
// keeps every byte the handler wrote, also those the connection did not take (the
// caller left): the answer is what the handler produced, and whether it is whole is
// decided when the handler returns ([recorder.answer]).
//
// Its limit and lengths within it are 32 bits (no store keeps an answer of 2 GiB),
// so that it takes 80 bytes ([httpRunning]).
type recorder struct {
	http.ResponseWriter
	ans      []byte  // the stored answer: status and header, then the body written so far
	size     int     // the body's size, as the handler wrote it
	declared int64   // the Content-Length the handler set; -1 for none
	buf      *[]byte // the pooled buffer ans is in; nil once it is not
	max      int32
	status   int32 // 0 until the header is written
	head     int32 // the length of the status and header at the start of the answer, within max
	over     bool  // the answer passed the limit: ans is nil
	failed   bool  // a write to the caller failed: it did not get the whole answer
	upgraded bool  // 101 Switching Protocols, or the connection was hijacked
}

// answerBufs are the buffers a recorder keeps the answer in while the handler
// writes: the answer stored is then a copy of its own length, and a record held for
// a retention keeps no spare capacity. An answer that outgrows one leaves it.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, answerBufCap); return &b }}

const answerBufCap = 1024

// putBuf gives the pooled buffer back, once ans is no longer in it.
func (w *recorder) putBuf() {
	if w.buf != nil {
		answerBufs.Put(w.buf)
		w.buf = nil
	}
}

// seal ends the recording: a write after the handler returned (which net/http does
// not allow) must not reach a buffer another request now uses.
func (w *recorder) seal() {
	w.over, w.ans = true, nil
	w.putBuf()
}

// snapshot starts the stored answer with the status and the header as they are sent.
func (w *recorder) snapshot(code int) {
	w.status = int32(code)
	h := w.ResponseWriter.Header()
	w.declared = -1
	if v, ok := h["Content-Length"]; ok && len(v) == 1 {
		if n, err := strconv.ParseInt(v[0], 10, 64); err == nil && n >= 0 {
			w.declared = n
		}
	}
	w.buf = answerBufs.Get().(*[]byte)
	w.ans = appendHTTPHead((*w.buf)[:0], code, h)
	w.head = int32(min(len(w.ans), math.MaxInt32))
	if len(w.ans) > int(w.max) {
		w.seal()
	} else if cap(w.ans) != answerBufCap { // a head larger than the buffer
		w.putBuf()
	}
}

func (w *recorder) WriteHeader(code int) {
	if code == http.StatusSwitchingProtocols {
		w.upgraded = true
	} else if w.status == 0 && code >= 200 {
		w.snapshot(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 && !w.upgraded {
		w.snapshot(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(b)
	if errors.Is(err, http.ErrBodyNotAllowed) || errors.Is(err, http.ErrHijacked) {
		return n, err // not part of any answer
	}
	if err != nil {
		w.failed = true
	}
	w.size += len(b)
	if !w.over {
		if len(w.ans)+len(b) > int(w.max) {
			w.seal()
		} else {
			grows := len(w.ans)+len(b) > cap(w.ans)
			w.ans = append(w.ans, b...)
			if grows {
				w.putBuf()
			}
		}
	}
	return n, err
}

// answer returns the answer to store when the handler returned; when keepable, a
// store that refuses it for its size gets the record of an answer of total bytes
// not kept instead. An answer whose delivery
// failed is stored only when it is provably whole (its body matches the
// Content-Length the handler set: a handler that stops writing at the first error,
// as most do, leaves a shorter body); one whose body does not match its
// Content-Length was cut short as well. Neither is the answer: a record saying it
// was not kept is stored instead, so that a repeat is refused, never run again.
//
// With lend, for a store that copies the answer before Complete returns, the answer
// may be the recorder's own buffer, and the recording is not sealed: the caller
// seals it when the store has its copy.
func (w *recorder) answer(head, lend bool) (ans []byte, total int, keepable bool) {
	whole := !w.failed
	if w.declared >= 0 && !head && bodyAllowed(int(w.status)) {
		whole = int64(w.size) == w.declared
	}
	trailer := trailersOf(w.ResponseWriter.Header())
	total = int(w.head) + w.size
	ans = w.ans
	if len(trailer) > 0 && !w.over {
		ans = withTrailers(ans, int(w.head), trailer)
		total = len(ans)
	}
	over := w.over
	switch {
	case !whole:
		ans, keepable = encodeNotKeptWhy(int(w.status), w.size, whyIncomplete), false
	case over || total > int(w.max):
		ans, keepable = encodeNotKept(int(w.status), total), false
	case !lend && (cap(ans) != len(ans) || w.buf != nil):
		// Its own (not the pooled buffer's, which seal gives back, even when the
		// answer fills it exactly), of its own length: a store may keep it for the
		// whole retention.
		ans, keepable = append(make([]byte, 0, len(ans)), ans...), true
	default:
		keepable = true
	}
	if !lend {
		w.seal()
	}
	return ans, total, keepable
}

// bodyAllowed reports whether a response with status has a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// Flush flushes the underlying writer when it can.
func (w *recorder) Flush() {
	if w.status == 0 && !w.upgraded {
		w.snapshot(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack takes the connection over when the underlying writer can: the request then
// has no HTTP answer to store, and its key is released.
func (w *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.upgraded = true
	}
	return conn, rw, err
}

// Unwrap lets [http.ResponseController] reach the underlying writer.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }
