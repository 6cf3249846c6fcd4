package deadlinekit

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/internal/idempotency"
	"github.com/deadlinekit/deadlinekit/propagate"
)

// WithEdge makes the server an edge, one that answers end users, in [NewHandler],
// [ServerOptions] and connectkit's HandlerOption (there the layers' refusals and
// the key check; a handler's connect error is its own):
//
//   - the toolkit's own refusals (the guard's, propagate's, dedup's) are answered in
//     public words with their status and Retry-After ("not enough time left to serve
//     the request", "overloaded, retry in 2 s", "malformed Grpc-Timeout header: no
//     digits"), and so is every error the handler answers with [WriteHTTPError] or
//     [GRPCError], as [Public] words it (a caller's own malformed key, a key used for
//     another request keep their texts); the whole error goes on the request's span.
//     The handler's own answers (http.Error, a status it returns itself) are its own;
//   - the toolkit's internal headers and trailers (grpc-retry-pushback-ms,
//     grpc-previous-rpc-attempts, every deadlinekit-*) are stripped from what the
//     server sends; Retry-After, Idempotent-Replayed and RetryInfo stay;
//   - the level end users claim (deadlinekit-criticality) is never read: it is
//     removed from the request before any layer sees it, so that an end user can
//     neither promote itself nor be refused for a malformed one; the level is
//     [WithCriticality]'s, or critical;
//   - a request whose Idempotency-Key (idempotency-key metadata) [dedup.ParseKey]
//     refuses, two header lines among others, is answered 400 (InvalidArgument) with
//     the reason before any layer runs, also without [WithDedup]: a gateway never
//     forwards the first of two keys and runs.
//
// Default: not an edge; a service called by other services keeps the signals its
// callers' layers read.
func WithEdge() Option {
	return optionFunc(func(c *config) { c.edge = true })
}

// internalHeader reports whether an HTTP header or gRPC metadata key (any case) is
// one of the toolkit's signals between its own layers, which an edge keeps to itself.
func internalHeader(k string) bool {
	const prefix = "deadlinekit-"
	if len(k) >= len(prefix) && strings.EqualFold(k[:len(prefix)], prefix) {
		return true
	}
	return strings.EqualFold(k, "grpc-retry-pushback-ms") || strings.EqualFold(k, "grpc-previous-rpc-attempts")
}

// edgeState is one request's at the edge: whether the handler itself answered.
type edgeState struct {
	ctx     context.Context // the request's, for its span
	handler atomic.Bool     // the handler answered (edgeInner, the inner interceptors)
	// handlerErr is the error the gRPC handler returned (edgeUnaryInner).
	handlerErr error
	replayed   atomic.Bool  // a gRPC answer marked idempotent-replayed (dedup's replay)
	pushback   atomic.Value // string: the grpc-retry-pushback-ms a gRPC layer set
}

type edgeKey struct{}

// edgeOf returns the edge state of a request at the edge, from its context.
func edgeOf(ctx context.Context) *edgeState {
	st, _ := ctx.Value(edgeKey{}).(*edgeState)
	return st
}

// record puts err, the whole of it, on the request's span, as [Public] does.
func (st *edgeState) record(err error) {
	if span := trace.SpanFromContext(st.ctx); span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(otelcodes.Error, err.Error())
	}
}

// edgeOuter is the edge's outermost layer: the key check, and the writer that keeps
// internals from the end user.
func edgeOuter(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if vs, ok := r.Header[idempotency.Header]; ok {
			if _, err := dedup.ParseKey(vs); err != nil {
				stripInternal(w.Header())
				writeText(w, http.StatusBadRequest, err.Error())
				return
			}
		}
		st := &edgeState{}
		ctx := context.WithValue(r.Context(), edgeKey{}, st)
		st.ctx = ctx
		next.ServeHTTP(&edgeWriter{ResponseWriter: w, st: st, req: r}, r.WithContext(ctx))
	})
}

// edgeInner marks what the handler writes as the handler's.
func edgeInner(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := edgeOf(r.Context())
		if st == nil {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(&handlerWriter{ResponseWriter: w, st: st}, r)
	})
}

func stripInternal(h http.Header) {
	for k := range h {
		if internalHeader(k) || strings.HasPrefix(k, http.TrailerPrefix) && internalHeader(k[len(http.TrailerPrefix):]) {
			delete(h, k)
		}
	}
}

// writeText answers with status code and text as a text/plain body.
func writeText(w http.ResponseWriter, code int, text string) {
	h := w.Header()
	h.Del("Content-Length")
	h.Del("Content-Encoding")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(text + "\n"))
}

// handlerWriter is the handler's writer at the edge: it notes that the handler
// answered.
type handlerWriter struct {
	http.ResponseWriter
	st *edgeState
}

func (w *handlerWriter) WriteHeader(code int) {
	if code >= 200 {
		w.st.handler.Store(true)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *handlerWriter) Write(b []byte) (int, error) {
	w.st.handler.Store(true)
	return w.ResponseWriter.Write(b)
}

func (w *handlerWriter) Flush() {
	w.st.handler.Store(true)
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap is for http.ResponseController.
func (w *handlerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// edgeWriter is what the edge sends: internal headers stripped, and a failure the
// toolkit's layers wrote themselves (not the handler, not a stored answer replayed)
// in public words.
type edgeWriter struct {
	http.ResponseWriter
	st      *edgeState
	req     *http.Request
	wrote   bool // the final header was written
	swallow bool // the body is the edge's: the layer's own is dropped
}

func (w *edgeWriter) WriteHeader(code int) {
	if w.wrote {
		w.ResponseWriter.WriteHeader(code) // net/http logs the superfluous call
		return
	}
	h := w.Header()
	if code < 200 {
		stripInternal(h)
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.wrote = true
	if code >= 400 && !w.st.handler.Load() && h.Get(dedup.ReplayedHeader) == "" {
		text := w.layerText(code)
		stripInternal(h)
		writeText(w.ResponseWriter, code, text)
		w.swallow = true
		return
	}
	stripInternal(h)
	w.ResponseWriter.WriteHeader(code)
}

func (w *edgeWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.swallow {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

func (w *edgeWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if !w.swallow {
		_ = http.NewResponseController(w.ResponseWriter).Flush()
	}
}

// Unwrap is for http.ResponseController.
func (w *edgeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// layerText is the public text of a layer's own refusal with status code, read off
// the signals it set (before they are stripped) and the request.
func (w *edgeWriter) layerText(code int) string {
	switch code {
	case http.StatusBadRequest:
		if text, ok := deadlineHeaderFault(w.req.Header); ok {
			return text
		}
		return "invalid request"
	case http.StatusRequestEntityTooLarge:
		return "request body too large"
	case http.StatusUnprocessableEntity:
		return textKeyReused
	case http.StatusGone:
		return "the answer to this Idempotency-Key was not kept"
	}
	x := httpFailure(code, w.Header())
	return reason(x.Code, x.Pushback, comeBack(x.Pushback, x.RetryAfter))
}

// deadlineHeaderFault names what is wrong with the request's deadline header, as
// propagate refused it: the header and the reason, never the value.
func deadlineHeaderFault(h http.Header) (string, bool) {
	for _, src := range [...]struct {
		name   string
		decode func(string) (_ any, err error)
	}{
		{propagate.HeaderGRPCTimeout, func(s string) (any, error) { return propagate.DecodeGRPCTimeout(s) }},
		{propagate.HeaderConnectTimeout, func(s string) (any, error) { return propagate.DecodeConnectTimeout(s) }},
		{propagate.HeaderEnvoyTimeout, func(s string) (any, error) { return propagate.DecodeEnvoyTimeout(s) }},
	} {
		vs := h[src.name]
		switch {
		case len(vs) > 1:
			return "malformed " + src.name + " header: repeated " + strconv.Itoa(len(vs)) + " times", true
		case len(vs) == 1:
			if _, err := src.decode(vs[0]); err != nil {
				return publicText(err, wire{code: codes.InvalidArgument, status: http.StatusBadRequest}), true
			}
		}
	}
	return "", false
}

// edgeOfWriter returns the edge state of the request w answers, when w is (or wraps,
// as http.ResponseController unwraps) the edge's writer.
func edgeOfWriter(w http.ResponseWriter) *edgeState {
	for range 16 {
		switch x := w.(type) {
		case *handlerWriter:
			return x.st
		case *edgeWriter:
			return x.st
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
	return nil
}
