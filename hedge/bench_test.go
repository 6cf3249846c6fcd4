package hedge_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit/hedge"
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
	b.Run("grpc", func(b *testing.B) {
		invoker := func(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
			return nil
		}
		ic := hedge.UnaryClientInterceptor(hedge.WithDelay(hedge.Delay{Initial: time.Second}), hedge.WithIdempotentMethods("/s/m"))
		req, reply := &wrapperspb.StringValue{}, &wrapperspb.StringValue{}
		b.ReportAllocs()
		for b.Loop() {
			if err := ic(b.Context(), "/s/m", req, reply, nil, invoker); err != nil {
				b.Fatal(err)
			}
		}
	})
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
