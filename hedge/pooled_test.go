package hedge_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/propagate"
)

// TestPooledCallsOverPropagateLoopback: many callers at once through hedge over
// propagate over a transport that keeps every request and reads it again after
// its round trip (as a logging transport does), against a loopback server whose
// answers are fast or slow at random, so that calls answered before their hedge
// reuse pooled state while others are hedged. Every request keeps its own header
// (its caller's sequence, the mark, the budget), the response's Request stays the
// caller's after later calls, and -race sees no write to memory another
// goroutine reads.
func TestPooledCallsOverPropagateLoopback(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seq, _ := strconv.Atoi(r.Header.Get("X-Seq"))
		if seq%3 == 0 {
			_ = sleep(r.Context(), 30*time.Millisecond)
		}
		w.Header().Set("X-Seq", r.Header.Get("X-Seq"))
		_, _ = io.WriteString(w, r.Header.Get("X-Seq"))
	}))
	defer srv.Close()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	defer otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())

	var hedged, once atomic.Int64
	var mu sync.Mutex
	var kept []*http.Request
	base := testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := srv.Client().Transport.RoundTrip(r)
		go func() { // a logger reading the request after its round trip
			_ = r.Header.Get("X-Seq") + r.Header.Get(propagate.HeaderGRPCTimeout)
			_, _ = r.Context().Deadline()
		}()
		mu.Lock()
		kept = append(kept, r)
		mu.Unlock()
		return resp, err
	})
	rt := hedge.NewTransport(propagate.NewTransport(base, propagate.WithReserve(time.Millisecond)),
		hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond, MinSamples: 1 << 20}), hedge.WithMaxExtraLoad(1),
		hedge.WithObserver(func(_ context.Context, e hedge.Event) {
			if e.Attempts > 1 {
				hedged.Add(1)
			} else {
				once.Add(1)
			}
		}))
	type result struct {
		seq  int
		resp *http.Response
	}
	results := make([]result, 200)
	testkit.Parallel(8, len(results), func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if i%2 == 0 {
			c, s := tp.Tracer("t").Start(ctx, "caller")
			defer s.End()
			ctx = c
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/x", nil)
		req.Header.Set("X-Seq", strconv.Itoa(i))
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Errorf("call %d: %v", i, err)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != strconv.Itoa(i) {
			t.Errorf("call %d: answered %q", i, b)
		}
		results[i] = result{i, resp}
	})
	for _, r := range results {
		if r.resp == nil {
			continue
		}
		h := r.resp.Request.Header
		if h.Get("X-Seq") != strconv.Itoa(r.seq) || h.Get(propagate.HeaderGRPCTimeout) == "" || h.Get("Deadlinekit-Hedged-Above") == "" {
			t.Errorf("call %d: its response's request now carries %v", r.seq, h)
		}
	}
	t.Logf("%d calls hedged, %d sent once", hedged.Load(), once.Load())
	mu.Lock() // losers may still be sent: what was sent so far
	sent := slices.Clone(kept)
	mu.Unlock()
	for _, r := range sent {
		if r.Header.Get("X-Seq") == "" || r.Header.Get(propagate.HeaderGRPCTimeout) == "" {
			t.Errorf("a request sent carries %v", r.Header)
		}
	}
}
