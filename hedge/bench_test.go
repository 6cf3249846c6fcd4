package hedge_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/retry"
)

// instant answers at once, with a body that needs no allocation.
type instant struct{}

func (t *instant) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
}

// BenchmarkHedgeNoFire measures what the layer adds to a call that answers before
// the delay: "base" is the bare transport, "hedge" the same through NewTransport with
// a hedge armed (and never fired), "warming-up" a call not hedgeable yet,
// "not-idempotent" a POST passed through.
func BenchmarkHedgeNoFire(b *testing.B) {
	base := &instant{}
	armed := hedge.NewTransport(base, hedge.WithDelay(hedge.Delay{Initial: time.Second}))
	cold := hedge.NewTransport(base, hedge.WithDelay(hedge.Delay{MinSamples: 1 << 30}))
	for _, bc := range []struct {
		name   string
		rt     http.RoundTripper
		method string
	}{
		{"base", base, http.MethodGet},
		{"hedge", armed, http.MethodGet},
		{"warming-up", cold, http.MethodGet},
		{"not-idempotent", armed, http.MethodPost},
	} {
		b.Run(bc.name, func(b *testing.B) {
			req, _ := http.NewRequest(bc.method, "http://backend.test/x", nil)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := bc.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	// "grpc" starts the call in a slot; "grpc-full" as a full call, as it did
	// before slots (see slot.go).
	for _, v := range []struct {
		name string
		opts []hedge.Option
	}{{"grpc", nil}, {"grpc-full", []hedge.Option{hedge.WithoutFastPath()}}} {
		b.Run(v.name, func(b *testing.B) {
			invoker := func(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
				return nil
			}
			ic := hedge.UnaryClientInterceptor(append(v.opts, hedge.WithDelay(hedge.Delay{Initial: time.Second}), hedge.WithIdempotentMethods("/s/m"))...)
			req, reply := &wrapperspb.StringValue{}, &wrapperspb.StringValue{}
			b.ReportAllocs()
			for b.Loop() {
				if err := ic(b.Context(), "/s/m", req, reply, nil, invoker); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestObserverAllocs: an observer adds no allocation to a call (the event goes by
// value), and a call that cannot be hedged allocates nothing beyond the base's.
func TestObserverAllocs(t *testing.T) {
	base := &instant{}
	req, _ := http.NewRequest(http.MethodGet, "http://backend.test/x", nil)
	post, _ := http.NewRequest(http.MethodPost, "http://backend.test/x", nil)
	allocs := func(rt http.RoundTripper, r *http.Request) float64 {
		return testing.AllocsPerRun(200, func() {
			resp, err := rt.RoundTrip(r)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		})
	}
	var seen int
	observer := hedge.WithObserver(func(_ context.Context, e hedge.Event) { seen += e.Attempts })
	plain := allocs(base, req)
	for _, tc := range []struct {
		name       string
		rt         http.RoundTripper
		r          *http.Request
		wantAtMost float64
	}{
		{"not idempotent", hedge.NewTransport(base, observer), post, plain},
		// A hedgeable call carries the chain rule's mark: a copy of the request
		// and of its header map (3 allocations).
		{"warming up", hedge.NewTransport(base, observer, hedge.WithDelay(hedge.Delay{MinSamples: 1 << 30})), req, plain + 3},
		{"armed, no observer", hedge.NewTransport(base, hedge.WithDelay(hedge.Delay{Initial: time.Second})), req, plain + 9},
		{"armed, observer", hedge.NewTransport(base, observer, hedge.WithDelay(hedge.Delay{Initial: time.Second})), req, plain + 9},
	} {
		if got := allocs(tc.rt, tc.r); got > tc.wantAtMost {
			t.Errorf("%s: %v allocations per call, want at most %v", tc.name, got, tc.wantAtMost)
		}
	}
	if seen == 0 {
		t.Error("observer never called")
	}
}

// BenchmarkKeyedWriteHedge measures what hedging a keyed write buys against a server
// that deduplicates (dedup's middleware, memory store, on loopback), with and without
// WithKeyedWrites. Each call is a POST with a key of its own through retry (an attempt
// times out after 100 ms) → hedge (a hedge due 10 ms after its copy went out, no
// cap) → a base transport that counts copies. "slow-first": the payment takes 50 ms;
// a copy that arrives while it runs waits for its answer. "lost-first": the payment
// takes 1 ms, but the first copy of each call is lost on its way (held until its
// context ends, never reaching the server). Reported: ms/call, copies/call (requests
// sent by the client per call) and runs/call (handler runs: 1 when dedup holds).
func BenchmarkKeyedWriteHedge(b *testing.B) {
	for _, sc := range []struct {
		name string
		work time.Duration
		lose bool
	}{{"slow-first", 50 * time.Millisecond, false}, {"lost-first", time.Millisecond, true}} {
		for _, v := range []struct {
			name string
			opts []hedge.Option
		}{{"default", nil}, {"keyed-writes", []hedge.Option{hedge.WithKeyedWrites()}}} {
			b.Run(sc.name+"/"+v.name, func(b *testing.B) {
				var runs atomic.Int64
				srv := httptest.NewServer(dedup.NewMiddleware(dedup.NewMemoryStore())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					runs.Add(1)
					if sleep(r.Context(), sc.work) == nil {
						io.WriteString(w, "charged")
					}
				})))
				defer srv.Close()
				tr := &http.Transport{MaxIdleConnsPerHost: 8}
				defer tr.CloseIdleConnections()
				var copies atomic.Int64
				var lost sync.Map // keys whose first copy was lost
				base := testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
					copies.Add(1)
					if _, seen := lost.LoadOrStore(r.Header.Get("Idempotency-Key"), true); sc.lose && !seen {
						<-r.Context().Done()
						return nil, r.Context().Err()
					}
					return tr.RoundTrip(r)
				})
				fixed := 10 * time.Millisecond
				h := hedge.New(append([]hedge.Option{hedge.WithMaxExtraLoad(1),
					hedge.WithDelay(hedge.Delay{Initial: fixed, Min: fixed, Max: fixed, MinSamples: 1 << 30})}, v.opts...)...)
				client := &http.Client{Transport: retry.NewTransport(h.Transport(base), retry.WithAttemptTimeout(100*time.Millisecond), retry.WithBudget(nil))}
				calls := 0
				b.ReportAllocs()
				start := time.Now()
				for b.Loop() {
					calls++
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/payments", strings.NewReader("10 EUR"))
					req.Header.Set("Idempotency-Key", "pay-"+strconv.Itoa(calls))
					resp, err := client.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					cancel()
					if resp.StatusCode != http.StatusOK || string(body) != "charged" {
						b.Fatalf("call %d: %d %q", calls, resp.StatusCode, body)
					}
				}
				elapsed := time.Since(start)
				b.ReportMetric(float64(elapsed.Microseconds())/1000/float64(calls), "ms/call")
				b.ReportMetric(float64(copies.Load())/float64(calls), "copies/call")
				b.ReportMetric(float64(runs.Load())/float64(calls), "runs/call")
			})
		}
	}
}
