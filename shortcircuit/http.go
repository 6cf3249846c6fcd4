package shortcircuit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/deadlinekit/deadlinekit/internal/handlerwork"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

// NewMiddleware returns HTTP middleware that refuses a request with 504 Gateway
// Timeout, before next runs, when the time left on the request's context is below the
// floor or the deadline has passed. The body states the time left and the floor, and
// the header grpc-retry-pushback-ms: -1 tells the caller's retry layers not to retry
// it: a retry could only arrive with less time. The route key for per-route and
// adaptive floors is r.Pattern when a ServeMux has set it, else r.URL.Path; a ServeMux
// sets Pattern when it dispatches, so to key on patterns wrap each handler you
// register (mux.Handle("GET /items/{id}", guard(h))), not the mux.
//
// With a concurrency limit ([WithMaxConcurrency], [WithAdaptiveConcurrency]) a
// request beyond it waits for a slot; one that cannot finish in time is refused with
// 504 and "do not retry" as above, one refused because the queue is full gets 503
// with Retry-After and grpc-retry-pushback-ms set to the predicted wait, and one whose
// caller left while it waited gets 499.
//
// The deadline must already be on the request's context: put package propagate's
// middleware (or whatever sets it) outside this one. Each call builds an independent
// guard, with its own adaptive state and limit. A handler's panic goes through the
// guard unchanged.
func NewMiddleware(opts ...Option) func(http.Handler) http.Handler {
	g := newGuard(opts)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			var t ticket
			if !g.admit(ctx, routeOf(r), &t) {
				refuseHTTP(w, &t)
				return
			}
			if g.tracks(&t) && keyedHTTP(r) {
				wk, kctx := g.hold(ctx, &t)
				g.serveHTTP(w, r.WithContext(kctx), &wk.t, next)
				return
			}
			g.serveHTTP(w, r, &t, next)
		})
	}
}

// serveHTTP runs next for a request the guard admitted with t, and ends t.
func (g *guard) serveHTTP(w http.ResponseWriter, r *http.Request, t *ticket, next http.Handler) {
	if g.lim != nil {
		defer g.releaseOnPanic(t)
	}
	if t.win == nil {
		next.ServeHTTP(w, r)
		g.done(r.Context(), t, true)
		return
	}
	// Right inside retry's server side, whose writer notes the status already.
	if sw, ok := w.(handlerwork.StatusWriter); ok {
		next.ServeHTTP(w, r)
		g.done(r.Context(), t, sw.WrittenStatus(handlerwork.Seam{}) < http.StatusInternalServerError)
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	next.ServeHTTP(sw, r)
	g.done(r.Context(), t, sw.status < http.StatusInternalServerError)
}

// statusClientClosedRequest is the answer to a request whose caller cancelled while
// it was queued: nobody reads it (nginx's 499).
const statusClientClosedRequest = 499

// refuseHTTP writes the refusal of t: 504 with "do not retry" for lack of time, 503
// with the time to come back for an overloaded server.
func refuseHTTP(w http.ResponseWriter, t *ticket) {
	code := http.StatusGatewayTimeout
	// The handler did not run: a call that may not run twice can be sent again.
	w.Header().Set(pushback.UnprocessedKey, pushback.Yes)
	if d, ok := t.comeBack(); ok {
		code = http.StatusServiceUnavailable
		w.Header().Set(pushback.Key, strconv.FormatInt(int64(d/time.Millisecond), 10))
		w.Header().Set("Retry-After", strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10))
	} else {
		w.Header().Set(pushback.Key, pushback.DoNotRetry)
		if t.decision == Canceled {
			code = statusClientClosedRequest
		}
	}
	http.Error(w, t.refusal(), code)
}

func routeOf(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	if r.URL != nil {
		return r.URL.Path
	}
	return ""
}

// statusWriter notes the status of the response for the adaptive floor.
type statusWriter struct {
	http.ResponseWriter
	status int // 0 until the header is written
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes the underlying writer when it can.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets [http.ResponseController] reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
