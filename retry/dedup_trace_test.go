package retry_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/otelattr"
	"github.com/deadlinekit/deadlinekit/retry"
)

// spansOf runs fn under a traced handler span and returns the spans it ended: the
// retry layer starts the call's span and its attempts'.
func spansOf(t *testing.T, fn func(ctx context.Context)) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	ctx, handler := tp.Tracer("test").Start(context.Background(), "handler")
	fn(ctx)
	handler.End()
	return rec.Ended()
}

// dedupSpans returns the call span (the one with deadlinekit.attempts) and the
// attempt spans, in order, of spans.
func dedupSpans(t *testing.T, spans []sdktrace.ReadOnlySpan) (call map[attribute.Key]attribute.Value, attempts []map[attribute.Key]attribute.Value) {
	t.Helper()
	for _, s := range spans {
		a := testkit.Attrs(s)
		if _, ok := a[otelattr.AttemptsKey]; ok {
			call = a
		}
		if _, ok := a[otelattr.AttemptNumberKey]; ok {
			attempts = append(attempts, a)
		}
	}
	if call == nil {
		t.Fatal("no call span")
	}
	return call, attempts
}

// wantDedup fails t when a does not say replayed, conflict and (for a conflict) the
// come-back ms.
func wantDedup(t *testing.T, what string, a map[attribute.Key]attribute.Value, replayed, conflict bool, comeBack float64) {
	t.Helper()
	if a[otelattr.DedupReplayedKey].AsBool() != replayed || a[otelattr.DedupConflictKey].AsBool() != conflict ||
		a[otelattr.DedupComeBackKey].AsFloat64() != comeBack {
		t.Errorf("%s: replayed %v conflict %v come-back %v; want %v %v %v", what, a[otelattr.DedupReplayedKey].String(),
			a[otelattr.DedupConflictKey].String(), a[otelattr.DedupComeBackKey].String(), replayed, conflict, comeBack)
	}
	if _, ok := a[otelattr.DedupReplayedKey]; !ok {
		t.Errorf("%s: no %s", what, otelattr.DedupReplayedKey)
	}
}

func keyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])[:16]
}

// wantKeyHash fails t when the call span lacks the key's hash, or when any span
// carries the key itself.
func wantKeyHash(t *testing.T, call map[attribute.Key]attribute.Value, spans []sdktrace.ReadOnlySpan, key string) {
	t.Helper()
	if got := call[otelattr.IdempotencyKeyHashKey].AsString(); got != keyHash(key) {
		t.Errorf("call span's key hash %q; want %q", got, keyHash(key))
	}
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.String(), key) {
				t.Errorf("span %q carries the key in %s", s.Name(), kv.Key)
			}
		}
	}
}

// The caller's spans tell the dedup story: a conflict (409 with its come-back) on
// the attempt that met it and on the call, a replay on the call whose answer was
// the stored one, and the key's hash, never the key. The server is package dedup,
// behind a first answer of 409 as dedup gives it while the first still runs.
func TestDedupStoryOnCallerSpansHTTP(t *testing.T) {
	const key = "order-7f3a"
	var n atomic.Int32
	stored := dedup.NewMiddleware(dedup.NewMemoryStore())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "charged")
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Grpc-Retry-Pushback-Ms", "20")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusConflict)
			return
		}
		stored.ServeHTTP(w, r)
	}))
	defer srv.Close()
	client := newClient(t, retry.WithBudget(nil))
	post := func(ctx context.Context) {
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL, strings.NewReader("pay 5"))
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}

	spans := spansOf(t, post)
	call, attempts := dedupSpans(t, spans)
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans; want 2", len(attempts))
	}
	wantDedup(t, "attempt 1", attempts[0], false, true, 20)
	wantDedup(t, "attempt 2", attempts[1], false, false, 0)
	wantDedup(t, "call", call, false, true, 20)
	wantKeyHash(t, call, spans, key)

	spans = spansOf(t, post) // a repeat: the stored answer
	call, attempts = dedupSpans(t, spans)
	wantDedup(t, "repeat's attempt", attempts[0], true, false, 0)
	wantDedup(t, "repeat's call", call, true, false, 0)
	wantKeyHash(t, call, spans, key)
}

func TestDedupStoryOnCallerSpansGRPC(t *testing.T) {
	const key = "order-9c1d"
	var n atomic.Int32
	conflictOnce := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if n.Add(1) == 1 {
			grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "20"))
			return nil, status.Error(codes.Aborted, "the first with this key still runs")
		}
		return h(ctx, req)
	}
	s := &testServer{fn: func(context.Context, int) error { return nil }}
	c := serveGRPC(t, s, []grpc.ServerOption{grpc.ChainUnaryInterceptor(conflictOnce, dedup.UnaryServerInterceptor(dedup.NewMemoryStore()))},
		grpc.WithUnaryInterceptor(retry.UnaryClientInterceptor(retry.WithBudget(nil))))
	call := func(ctx context.Context) {
		ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
		if _, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
	}

	spans := spansOf(t, call)
	cs, attempts := dedupSpans(t, spans)
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans; want 2", len(attempts))
	}
	wantDedup(t, "attempt 1", attempts[0], false, true, 20)
	wantDedup(t, "attempt 2", attempts[1], false, false, 0)
	wantDedup(t, "call", cs, false, true, 20)
	wantKeyHash(t, cs, spans, key)

	spans = spansOf(t, call)
	cs, attempts = dedupSpans(t, spans)
	wantDedup(t, "repeat's attempt", attempts[0], true, false, 0)
	wantDedup(t, "repeat's call", cs, true, false, 0)
	if s.calls() != 1 {
		t.Fatalf("the handler ran %d times; want 1", s.calls())
	}
}
