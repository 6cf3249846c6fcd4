package chaintest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// floorChain is user → 1 (HTTP) → 2 (gRPC) → 3 (HTTP) → 4 (gRPC), separate loopback
// servers built with the root constructors, each handler doing work[i] (a sleep)
// before it calls the next hop. Every hop's guard reports to an observer.
type floorChain struct {
	tb     testing.TB
	client *http.Client
	url    string // hop 1
	urls   [4]string
	mu     sync.Mutex
	events [4][]shortcircuit.Event
}

func startFloorChain(tb testing.TB, work [4]time.Duration, opts ...deadlinekit.Option) *floorChain {
	tb.Helper()
	ch := &floorChain{tb: tb}
	hopOpts := func(i int) []deadlinekit.Option {
		return append(slices.Clone(opts), deadlinekit.WithShortCircuit(shortcircuit.WithObserver(func(_ context.Context, e shortcircuit.Event) {
			ch.mu.Lock()
			ch.events[i] = append(ch.events[i], e)
			ch.mu.Unlock()
		})))
	}
	grpcHop := func(i int, h func(ctx context.Context) error) string {
		return serveHop(tb, h, deadlinekit.ServerOptions(hopOpts(i)...)...)
	}
	httpHop := func(i int, h func(ctx context.Context) error) string {
		s := httptest.NewServer(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := h(r.Context()); err != nil {
				deadlinekit.WriteHTTPError(w, err)
				return
			}
			io.WriteString(w, "ok")
		}), hopOpts(i)...))
		tb.Cleanup(s.Close)
		return s.URL
	}
	callHTTP := func(c *http.Client, ctx context.Context, url string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		return deadlinekit.FromHTTP(c.Do(req))
	}

	ch.urls[3] = grpcHop(3, func(ctx context.Context) error {
		time.Sleep(work[3])
		return nil
	})
	to4 := dial(tb, ch.urls[3], deadlinekit.DialOptions(opts...)...)
	ch.urls[2] = httpHop(2, func(ctx context.Context) error {
		time.Sleep(work[2])
		return deadlinekit.FromGRPC(invoke(ctx, to4), nil)
	})
	to3 := stackClient(tb, opts...)
	ch.urls[1] = grpcHop(1, func(ctx context.Context) error {
		time.Sleep(work[1])
		return deadlinekit.GRPCError(ctx, callHTTP(to3, ctx, ch.urls[2]))
	})
	to2 := dial(tb, ch.urls[1], deadlinekit.DialOptions(opts...)...)
	ch.urls[0] = httpHop(0, func(ctx context.Context) error {
		time.Sleep(work[0])
		return deadlinekit.FromGRPC(invoke(ctx, to2), nil)
	})
	ch.url = ch.urls[0]
	ch.client = stackClient(tb, opts...)
	return ch
}

// call sends one user request with the given budget and returns its status and how
// long it took.
func (ch *floorChain) call(budget time.Duration) (int, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ch.url, nil)
	resp, err := ch.client.Do(req)
	took := time.Since(start)
	if err != nil {
		return 0, took // refused before sending (the client's floor), or no answer
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, took
}

// lastEvent returns the last event of hop i's guard.
func (ch *floorChain) lastEvent(i int) shortcircuit.Event {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if len(ch.events[i]) == 0 {
		ch.tb.Fatalf("hop %d saw no request", i+1)
	}
	return ch.events[i][len(ch.events[i])-1]
}

// warm sends n user requests with a long budget, so that every guard learns its
// handler's time, and returns the median latency of the chain.
func (ch *floorChain) warm(n int) time.Duration {
	var took []time.Duration
	for range n {
		code, d := ch.call(time.Second)
		if code != http.StatusOK {
			ch.tb.Fatalf("warming up with a 1 s budget: status %d", code)
		}
		took = append(took, d)
	}
	slices.Sort(took)
	return took[len(took)/2]
}

// With the defaults, the floors do not compound down a 4-hop chain of fast handlers
// (HTTP and gRPC mixed): each guard's floor is what its own handler takes (learned,
// not a constant), and a budget close to the chain's own latency is answered. With
// the static floors of earlier versions (20 ms at every hop, a 5 ms reserve) the
// same budget is refused. The budget is 25 ms, or twice the chain's median latency
// measured in this run when the machine is slower than that.
func TestChainFloorsDoNotCompound(t *testing.T) {
	work := [4]time.Duration{2 * time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond}
	for _, v := range []struct {
		name    string
		opts    []deadlinekit.Option
		answers bool
	}{
		{"defaults", nil, true},
		{"static 20 ms floors", []deadlinekit.Option{deadlinekit.WithFloor(deadline.DefaultFloor),
			deadlinekit.WithPropagate(propagate.WithMaxReserveFraction(0))}, false},
	} {
		t.Run(v.name, func(t *testing.T) {
			ch := startFloorChain(t, work, v.opts...)
			latency := ch.warm(30)
			// Each guard's floor is learned: within what its own handler took.
			for i := range 4 {
				ch.mu.Lock()
				var most time.Duration
				for _, e := range ch.events[i] {
					most = max(most, e.Duration)
				}
				ch.mu.Unlock()
				f := ch.lastEvent(i).Floor
				if v.answers && (f < deadline.MinFloor || f > most) {
					t.Errorf("hop %d: floor %v; want learned, between 1 ms and its handler's longest %v", i+1, f, most)
				}
			}
			budget := max(25*time.Millisecond, 2*latency)
			answered := 0
			var codes []int
			for range 10 {
				code, _ := ch.call(budget)
				if code == http.StatusOK {
					answered++
				}
				codes = append(codes, code)
			}
			if v.answers && answered == 0 {
				var hops []string
				for i := range 4 {
					e := ch.lastEvent(i)
					hops = append(hops, fmt.Sprintf("hop %d: %v with %v left, floor %v", i+1, e.Admission, e.Remaining, e.Floor))
				}
				t.Errorf("a %v budget (chain latency %v) was never answered in 10 calls (%v); want answered; %s", budget, latency, codes, strings.Join(hops, "; "))
			}
			if !v.answers && answered > 0 && budget == 25*time.Millisecond {
				t.Errorf("with static floors a 25 ms budget was answered %d times of 10; want refused (the floors compound)", answered)
			}
		})
	}
}

// A hop whose handler takes 50 ms refuses, before its handler runs, a request that
// arrives with 30 ms, under the defaults: its floor is learned from its handler.
func TestChainSlowHopStillRefuses(t *testing.T) {
	ch := startFloorChain(t, [4]time.Duration{time.Millisecond, 50 * time.Millisecond, time.Millisecond, time.Millisecond})
	ch.warm(25)
	// Straight to hop 2 (gRPC) with 30 ms.
	conn := dial(t, ch.urls[1], deadlinekit.DialOptions()...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	err := invoke(ctx, conn)
	e := ch.lastEvent(1)
	if err == nil || e.Admission != shortcircuit.BelowFloor || e.Floor < 45*time.Millisecond {
		t.Errorf("30 ms to the 50 ms hop: %v; guard %v, floor %v; want refused below a floor of about 50 ms", err, e.Admission, e.Floor)
	}
}

// BenchmarkChainLeastBudget finds, by bisection, the least budget the 4-hop chain of
// 3 ms handlers (HTTP and gRPC mixed, root constructors, loopback) answers: a budget
// is answered when at least 8 of 10 user requests get a 200. "static-20ms" is the
// defaults of earlier versions (a 20 ms floor at every layer and a fixed 5 ms
// reserve), "defaults" today's (learned floors, a 1 ms client floor, a reserve of at
// most 10% of the time left).
//
//	go test -run '^$' -bench ChainLeastBudget -benchtime 1x -count 3 ./chaintest
func BenchmarkChainLeastBudget(b *testing.B) {
	work := [4]time.Duration{3 * time.Millisecond, 3 * time.Millisecond, 3 * time.Millisecond, 3 * time.Millisecond}
	for _, v := range []struct {
		name string
		opts []deadlinekit.Option
	}{
		{"static-20ms", []deadlinekit.Option{deadlinekit.WithFloor(deadline.DefaultFloor), deadlinekit.WithPropagate(propagate.WithMaxReserveFraction(0))}},
		{"defaults", nil},
	} {
		b.Run(v.name, func(b *testing.B) {
			ch := startFloorChain(b, work, v.opts...)
			latency := ch.warm(40)
			answers := func(budget time.Duration) bool {
				ok := 0
				for range 10 {
					if code, _ := ch.call(budget); code == http.StatusOK {
						ok++
					}
				}
				return ok >= 8
			}
			var least time.Duration
			for b.Loop() {
				lo, hi := time.Millisecond, 500*time.Millisecond
				for hi-lo > 250*time.Microsecond {
					mid := (lo + hi) / 2
					if answers(mid) {
						hi = mid
					} else {
						lo = mid
					}
				}
				least = hi
			}
			b.ReportMetric(float64(least)/float64(time.Millisecond), "least-budget-ms")
			b.ReportMetric(float64(latency)/float64(time.Millisecond), "chain-p50-ms")
		})
	}
}
