package retry

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/deadlinekit/deadlinekit/internal/attempts"
	"github.com/deadlinekit/deadlinekit/internal/handlerwork"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

// inbound is the server-side state of one inbound request, shared between the server
// layer and the outbound retry layers of its handler.
type inbound struct {
	retry  bool        // the inbound request is itself a retry attempt
	gaveUp atomic.Bool // an outbound layer gave up on a retryable failure
}

// inboundKey is the key of the inbound state in a context: handlerwork's, so that
// dedup, inside this layer, reads what the caller will be told ([inbound.GaveUp]).
type inboundKey = handlerwork.InboundKey

// GaveUp reports whether an outbound retry layer of the handler gave up (for
// package handlerwork's readers).
func (in *inbound) GaveUp() bool { return in.gaveUp.Load() }

func inboundFrom(ctx context.Context) *inbound {
	in, _ := ctx.Value(inboundKey{}).(*inbound)
	return in
}

// ServingRetry reports whether ctx belongs to a request that is itself a retry attempt
// of a caller (it carried grpc-previous-rpc-attempts ≥ 1), as marked by
// [NewMiddleware] or [UnaryServerInterceptor]. The retry layers make a single attempt
// for such a context: the caller already retries.
func ServingRetry(ctx context.Context) bool {
	in := inboundFrom(ctx)
	return in != nil && in.retry
}

// WithServingRetry returns a context marked as serving a retry attempt, for servers
// that learn it another way (a framework, a queue's redelivery count). Outbound retry
// layers then make a single attempt.
func WithServingRetry(ctx context.Context) context.Context {
	return context.WithValue(ctx, inboundKey{}, &inbound{retry: true})
}

// NewMiddleware returns the server side of the one-layer rule for HTTP. It marks the
// request context when the request carries grpc-previous-rpc-attempts ≥ 1, so that
// the retry layers ([NewTransport]) used by the handler with that context make a
// single attempt ([ServingRetry]). And when one of them gave up on a retryable
// failure, a failure answer of the handler (5xx, 429, 408, 425) carries
// grpc-retry-pushback-ms: -1, so that the caller's retry layer does not retry what
// was already retried here. It takes no option: the client side's options do not
// apply to it.
func NewMiddleware() func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler { return &server{next: next} }
}

// server is [NewMiddleware]'s handler.
type server struct{ next http.Handler }

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.ServeHTTPContext(w, r, r.Context(), handlerwork.Seam{})
}

// ServeHTTPContext serves r under ctx, as ServeHTTP serves r.WithContext(ctx), with
// one copy of r (package internal/handlerwork: propagate's middleware, right
// outside, hands its context over here).
func (s *server) ServeHTTPContext(w http.ResponseWriter, r *http.Request, ctx context.Context, _ handlerwork.Seam) {
	sr := &servedRequest{Context: ctx}
	if vs := r.Header[attempts.Header]; len(vs) > 0 { // the canonical name: Get would canonicalize Key
		sr.in.retry = attempts.Parse(vs[0]) > 0
	}
	sr.w = pushbackWriter{ResponseWriter: w, in: &sr.in}
	s.next.ServeHTTP(&sr.w, r.WithContext(sr))
}

// servedRequest is one request through [NewMiddleware]: the handler's context,
// which holds the inbound state, and its response writer, in one allocation.
type servedRequest struct {
	context.Context
	in inbound
	w  pushbackWriter
}

// Value answers the inbound state's key, as context.WithValue would.
func (s *servedRequest) Value(key any) any {
	if key == (inboundKey{}) {
		return &s.in
	}
	return s.Context.Value(key)
}

// pushbackWriter adds "do not retry" to a failure answer when an outbound retry layer
// of the handler gave up.
type pushbackWriter struct {
	http.ResponseWriter
	in     *inbound
	wrote  bool
	status int // the status written, once wrote
}

// WrittenStatus is the status of the answer, 0 until it is written (package
// internal/handlerwork: the guard inside reads it).
func (w *pushbackWriter) WrittenStatus(handlerwork.Seam) int { return w.status }

func (w *pushbackWriter) WriteHeader(code int) {
	if !w.wrote && code >= 200 {
		w.wrote, w.status = true, code
		if w.in.gaveUp.Load() && handlerwork.FailureStatus(code) {
			w.Header().Set(pushback.Key, pushback.DoNotRetry)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *pushbackWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Flush implements [http.Flusher] when the underlying writer does.
func (w *pushbackWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets [http.ResponseController] reach the underlying writer.
func (w *pushbackWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// UnaryServerInterceptor returns the server side of the one-layer rule for gRPC: like
// [NewMiddleware], it marks the context of a call that carries
// grpc-previous-rpc-attempts ≥ 1 ([ServingRetry]), and when an outbound retry layer
// of the handler gave up on a retryable failure and the handler fails, it sets the
// trailer grpc-retry-pushback-ms: -1. The trailer then holds that one value: a wait
// the handler set there (relaying its downstream's "come back in N") is dropped, as
// the wait travels in the status's google.rpc.RetryInfo (deadlinekit.GRPCError puts
// it there); otherwise the handler's last value is sent, once.
func UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		s := &serverCall{}
		// One key's first value, read in place: no copy of the metadata.
		s.in.retry = attempts.Parse(attempts.FirstIncoming(ctx, attempts.Key)) > 0
		hctx := context.WithValue(ctx, inboundKey{}, &s.in)
		if s.ServerTransportStream = grpc.ServerTransportStreamFromContext(ctx); s.ServerTransportStream != nil {
			hctx = grpc.NewContextWithServerTransportStream(hctx, s)
		}
		resp, err := handler(hctx, req)
		v := s.value()
		if err != nil && s.in.gaveUp.Load() {
			v = pushback.DoNotRetry
		}
		if v != "" {
			_ = grpc.SetTrailer(ctx, metadata.Pairs(pushback.Key, v))
		}
		return resp, err
	}
}

// serverCall is one call through [UnaryServerInterceptor]: its inbound state, and
// its transport stream with the handler's grpc-retry-pushback-ms held back, so that
// the trailer gets one value.
type serverCall struct {
	grpc.ServerTransportStream
	in       inbound
	mu       sync.Mutex
	pushback string // the last value the handler set
}

// SetTrailer sets md but for grpc-retry-pushback-ms, which it keeps for the end.
func (s *serverCall) SetTrailer(md metadata.MD) error {
	v := md.Get(pushback.Key)
	if len(v) == 0 {
		return s.ServerTransportStream.SetTrailer(md)
	}
	s.mu.Lock()
	s.pushback = v[len(v)-1]
	s.mu.Unlock()
	rest := md.Copy()
	delete(rest, pushback.Key)
	if len(rest) == 0 {
		return nil
	}
	return s.ServerTransportStream.SetTrailer(rest)
}

func (s *serverCall) value() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pushback
}

var (
	_ handlerwork.StatusWriter   = (*pushbackWriter)(nil)
	_ handlerwork.ContextHandler = (*server)(nil)
)
