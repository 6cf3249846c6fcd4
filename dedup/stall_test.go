package dedup_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/otelattr"
)

// stalledStore is a store that does not answer: every call waits until its context
// ends and returns its error, as a Redis client with context timeouts does when
// the server stalls.
type stalledStore struct{ dedup.Store }

func (stalledStore) Acquire(ctx context.Context, key string, l dedup.Lease) (bool, dedup.Entry, error) {
	<-ctx.Done()
	return false, dedup.Entry{}, ctx.Err()
}

// TestStalledStoreIsUnavailable: a store that does not answer within the request's
// time is a store that cannot be reached (503 + Retry-After, store_unavailable), not
// a caller that left; a caller that did leave is still told so (499, canceled).
func TestStalledStoreIsUnavailable(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(t.Context())
	ran := 0
	h := dedup.NewMiddleware(stalledStore{dedup.NewMemoryStore()})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran++ }))
	serveOne := func(ctx context.Context) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader("1"))
		req.Header.Set("Idempotency-Key", "k")
		ctx, span := tp.Tracer("test").Start(ctx, "server")
		defer span.End()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req.WithContext(ctx))
		return w
	}

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	w := serveOne(ctx)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" || w.Header().Get("Grpc-Retry-Pushback-Ms") == "-1" {
		t.Errorf("stalled store: %d %v %q, want 503 with Retry-After", w.Code, w.Header(), w.Body)
	}

	ctx, cancel = context.WithCancel(t.Context())
	go cancel() // the caller leaves while the store is asked
	if w := serveOne(ctx); w.Code != 499 {
		t.Errorf("caller left: %d %q, want 499", w.Code, w.Body)
	}

	spans := sr.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	testkit.WantAttrs(t, spans[0], otelattr.DedupOutcomeKey.String("store_unavailable"))
	testkit.WantAttrs(t, spans[1], otelattr.DedupOutcomeKey.String("canceled"))
	if ran != 0 {
		t.Fatalf("the handler ran %d times without its dedup", ran)
	}
}

// TestGRPCStalledStoreIsUnavailable: the same reading in the gRPC adapter: a store
// that did not answer within the call's time (the server's deadline, shorter than
// the client's) is Unavailable with a pushback, not Canceled.
func TestGRPCStalledStoreIsUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serverDeadline := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond) // as propagate's clamp would
		defer cancel()
		return handler(ctx, req)
	}
	svc := &grpcCharges{}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(serverDeadline, dedup.UnaryServerInterceptor(stalledStore{dedup.NewMemoryStore()})))
	testgrpc.RegisterTestServiceServer(srv, svc)
	go srv.Serve(l)
	defer srv.Stop()
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx := metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", "k")
	var trailer metadata.MD
	_, err = testgrpc.NewTestServiceClient(cc).UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Trailer(&trailer))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("stalled store: %v, want Unavailable", err)
	}
	if p := first(trailer.Get("grpc-retry-pushback-ms")); p == "" || p == "-1" {
		t.Errorf("pushback %q, want a time to come back", p)
	}
	if svc.n.Load() != 0 {
		t.Fatalf("the handler ran %d times", svc.n.Load())
	}
}
