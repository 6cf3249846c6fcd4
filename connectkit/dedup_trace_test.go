package connectkit_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/otelattr"
)

// A connect caller's call span says its answer was a replay of the stored one
// (dedup's Idempotent-Replayed), and carries its key's hash.
func TestReplayOnCallerSpan(t *testing.T) {
	url, hc := serve(t, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
		return connect.NewResponse(wrapperspb.String("charged")), nil
	}, connectkit.HandlerOption(deadlinekit.WithDedup(dedup.NewMemoryStore())))
	c := client(hc, url, procPost, connectkit.ClientOption())
	for i, want := range []bool{false, true} {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		ctx, root := tp.Tracer("test").Start(context.Background(), "handler")
		req := connect.NewRequest(wrapperspb.String("pay 5"))
		req.Header().Set("Idempotency-Key", "order-1")
		if _, err := c.CallUnary(ctx, req); err != nil {
			t.Fatal(err)
		}
		root.End()
		tp.Shutdown(context.Background())
		found := false
		for _, s := range rec.Ended() {
			attrs := map[string]any{}
			for _, kv := range s.Attributes() {
				attrs[string(kv.Key)] = kv.Value.AsInterface()
			}
			if _, ok := attrs[string(otelattr.AttemptsKey)]; !ok {
				continue
			}
			found = true
			if attrs[string(otelattr.DedupReplayedKey)] != want || attrs[string(otelattr.IdempotencyKeyHashKey)] == nil {
				t.Errorf("call %d: call span %v; want replayed %v and the key's hash", i+1, attrs, want)
			}
		}
		if !found {
			t.Fatalf("call %d: no call span", i+1)
		}
	}
}
