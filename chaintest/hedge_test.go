package chaintest_test

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
)

// hedgeChain is user → A (HTTP) → B (gRPC, an idempotent method) → C (HTTP), three
// loopback servers built with the root constructors, every client hedging (the
// user's included). work[i] is hop i's handler before it calls the next (C's is its
// whole work); it gets the handler's context and the hop's request number (1-based).
type hedgeChain struct {
	tb      testing.TB
	client  *http.Client
	url     string
	runs    [3]atomic.Int64  // handler runs per hop
	hedgers [3]*hedge.Hedger // the user's client's, A's, B's
}

func startHedgeChain(tb testing.TB, work [3]func(ctx context.Context, n int64), hedgeOpts ...hedge.Option) *hedgeChain {
	tb.Helper()
	ch := &hedgeChain{tb: tb}
	for i := range ch.hedgers {
		ch.hedgers[i] = hedge.New(append([]hedge.Option{hedge.WithIdempotentMethods(hopMethod)}, hedgeOpts...)...)
	}
	client := func(i int) []deadlinekit.Option {
		return []deadlinekit.Option{deadlinekit.WithSharedHedger(ch.hedgers[i])}
	}
	c := httptest.NewServer(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		work[2](r.Context(), ch.runs[2].Add(1))
		io.WriteString(w, "ok")
	})))
	tb.Cleanup(c.Close)
	toC := stackClient(tb, client(2)...)

	b := serveHop(tb, func(ctx context.Context) error {
		work[1](ctx, ch.runs[1].Add(1))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
		if err != nil {
			return err
		}
		return deadlinekit.GRPCError(ctx, deadlinekit.FromHTTP(toC.Do(req)))
	}, deadlinekit.ServerOptions()...)
	conn := dial(tb, b, deadlinekit.DialOptions(client(1)...)...)

	a := httptest.NewServer(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		work[0](r.Context(), ch.runs[0].Add(1))
		if err := deadlinekit.FromGRPC(invoke(r.Context(), conn), nil); err != nil {
			deadlinekit.WriteHTTPError(w, err)
			return
		}
		io.WriteString(w, "ok")
	})))
	tb.Cleanup(a.Close)
	ch.url = a.URL
	ch.client = stackClient(tb, client(0)...)
	return ch
}

// call sends one user request (a GET) with a 2 s budget; hdr adds request headers.
func (ch *hedgeChain) call(hdr ...string) (int, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ch.url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	start := time.Now()
	resp, err := ch.client.Do(req)
	if err != nil {
		ch.tb.Fatalf("the user's call failed: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, time.Since(start)
}

// stall holds the handler until its context ends, or 2 s.
func stall(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Second):
	}
}

// The chain rule: every hop hedges, B is slow, and only the hedge nearest the user
// is sent. The user's call is hedgeable, so A's calls (and B's) are covered: a copy
// of the user's call runs them again. A does not hedge its call to B: B runs twice
// for one user request (the primary's, held until the user's hedge wins, and the
// hedge's, which is fast). Without the rule A hedges B as well.
func TestChainHedgesOnce(t *testing.T) {
	// Hedges after 50 ms: a fast answer is never that late, even on a loaded
	// machine. (After 5 ms, a busy machine made the fast answer to the user's
	// hedge late enough for A to hedge it, as it should a slow last copy.)
	delay := hedge.WithDelay(hedge.Delay{Initial: 50 * time.Millisecond, MinSamples: 1 << 30})
	slowB := func(slow int64) [3]func(context.Context, int64) {
		return [3]func(context.Context, int64){
			func(context.Context, int64) {},
			func(ctx context.Context, n int64) {
				if n <= slow {
					stall(ctx) // B's first requests are slow
				}
			},
			func(context.Context, int64) {},
		}
	}
	for _, v := range []struct {
		name string
		opts []hedge.Option
		rule bool
	}{{"chain rule", nil, true}, {"without the rule", []hedge.Option{hedge.WithoutChainRule()}, false}} {
		t.Run(v.name, func(t *testing.T) {
			// B's first request stalls; A's second (the user's hedge) takes 100 ms
			// before it calls B, so that A's own hedge of its slow call to B would
			// be due (after 50 ms) before the user's hedge could win.
			work := slowB(1)
			work[0] = func(_ context.Context, n int64) {
				if n == 2 {
					time.Sleep(100 * time.Millisecond)
				}
			}
			ch := startHedgeChain(t, work, append([]hedge.Option{delay}, v.opts...)...)
			if code, _ := ch.call(); code != http.StatusOK {
				t.Fatalf("status %d", code)
			}
			user, a, b := ch.hedgers[0].Stats(), ch.hedgers[1].Stats(), ch.hedgers[2].Stats()
			if v.rule {
				if user.Hedges != 1 || a.Hedges != 0 || b.Hedges != 0 || ch.runs[1].Load() != 2 {
					t.Errorf("hedges sent: user %d, A %d, B %d; B ran %d times; want 1, 0, 0 and 2", user.Hedges, a.Hedges, b.Hedges, ch.runs[1].Load())
				}
			} else if a.Hedges == 0 {
				t.Errorf("without the rule A sent no hedge (B ran %d times); want A hedging its slow call too (this test's control)", ch.runs[1].Load())
			}
		})
	}
	// The user's hedge is the last copy its layer sends (two copies in all): its
	// subtree is not covered, so when it stalls as well, A hedges it there, once.
	t.Run("the last copy is hedged below", func(t *testing.T) {
		ch := startHedgeChain(t, slowB(2), delay)
		if code, _ := ch.call(); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
		user, a := ch.hedgers[0].Stats(), ch.hedgers[1].Stats()
		if user.Hedges != 1 || a.Hedges != 1 || a.Covered != 1 || ch.runs[1].Load() != 3 {
			t.Errorf("hedges: user %d, A %d (A's calls covered: %d); B ran %d times; want 1, 1 (in the last copy), 1 and 3",
				user.Hedges, a.Hedges, a.Covered, ch.runs[1].Load())
		}
	})
	// A write the user's client may not hedge (a POST without an idempotency key)
	// carries no mark: nothing above covers its subtree, so A hedges its slow
	// (idempotent) call to B itself, and the write runs once.
	t.Run("a write is not covered", func(t *testing.T) {
		ch := startHedgeChain(t, slowB(1), delay)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ch.url, strings.NewReader("order"))
		resp, err := ch.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		user, a := ch.hedgers[0].Stats(), ch.hedgers[1].Stats()
		if resp.StatusCode != http.StatusOK || user.Hedges != 0 || user.NotIdempotent != 1 || a.Hedges != 1 || a.Covered != 0 || ch.runs[0].Load() != 1 {
			t.Errorf("POST: status %d; user hedges %d (not idempotent %d), A hedges %d (covered %d), A ran %d times; want 200, 0 (1), 1 (0), once",
				resp.StatusCode, user.Hedges, user.NotIdempotent, a.Hedges, a.Covered, ch.runs[0].Load())
		}
	})
	// A request that is itself a retry (grpc-previous-rpc-attempts ≥ 1, no mark) is
	// covered too, whoever sent it: A does not hedge B for it.
	t.Run("serving a retry", func(t *testing.T) {
		work := slowB(0)
		work[1] = func(ctx context.Context, n int64) {
			if n == 1 {
				time.Sleep(200 * time.Millisecond) // slow (a hedge would be due), but it answers
			}
		}
		ch := startHedgeChain(t, work, delay)
		ch.client = &http.Client{Transport: http.DefaultTransport} // a caller that does not hedge
		if code, _ := ch.call("grpc-previous-rpc-attempts", "1"); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
		if a := ch.hedgers[1].Stats(); a.Hedges != 0 {
			t.Errorf("A sent %d hedges for a request that is itself a retry; want 0", a.Hedges)
		}
	})
}

// BenchmarkHedgeChain measures the chain rule on the chain of [TestChainHedgesOnce]:
// every hop hedges (the root constructors' defaults), and B stalls for 100 ms in 5%
// of its calls (a seeded draw per chain; 1 ms of work at every hop otherwise). The
// variants run side by side, call by call: one chain per variant, 300 warm-up
// requests each, then 10000 rounds, 4 at a time, in which each variant gets one user
// request in turn (the order rotating), so that the machine's noise falls on all of
// them alike. Reported per variant (the unit's prefix): the extra calls that reach
// the bottom (C) per user request, in percent, the hedges all clients sent per user
// request, and the user's P99 and P99.9. "before" is each hop hedging for itself (hedge.WithoutChainRule),
// "after" the chain rule; at the default percentile (P99) and at P90
// (hedge.WithPercentile(0.9)), and at P90 with three copies (hedge.WithMaxAttempts(3));
// "no-hedging" leaves hedging off (one attempt).
//
//	go test -run '^$' -bench HedgeChain -benchtime 1x -count 2 ./chaintest
func BenchmarkHedgeChain(b *testing.B) {
	const (
		warm, n, workers = 300, 10000, 4
		slowShare        = 0.05
		stallFor         = 100 * time.Millisecond
	)
	variants := []struct {
		name string
		opts []hedge.Option
	}{
		{"no-hedging", []hedge.Option{hedge.WithMaxAttempts(1)}},
		{"P99/before", []hedge.Option{hedge.WithoutChainRule()}},
		{"P99/after", nil},
		{"P90/before", []hedge.Option{hedge.WithPercentile(0.9), hedge.WithoutChainRule()}},
		{"P90/after", []hedge.Option{hedge.WithPercentile(0.9)}},
		{"P90/after/3-copies", []hedge.Option{hedge.WithPercentile(0.9), hedge.WithMaxAttempts(3)}},
	}
	sleep := func(ctx context.Context, d time.Duration) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	chains := make([]*hedgeChain, len(variants))
	for i, v := range variants {
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(21, uint64(i)))
		work := [3]func(context.Context, int64){
			func(ctx context.Context, _ int64) { sleep(ctx, time.Millisecond) },
			func(ctx context.Context, _ int64) {
				mu.Lock()
				d := time.Millisecond
				if rng.Float64() < slowShare {
					d = stallFor
				}
				mu.Unlock()
				sleep(ctx, d)
			},
			func(ctx context.Context, _ int64) { sleep(ctx, time.Millisecond) },
		}
		chains[i] = startHedgeChain(b, work, v.opts...)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, ch := range chains {
			testkit.Parallel(workers, warm, func(int) { ch.call() })
		}
		before, bottom0 := make([][3]uint64, len(chains)), make([]int64, len(chains))
		lat := make([][]time.Duration, len(variants))
		for i, ch := range chains {
			for j, h := range ch.hedgers {
				before[i][j] = h.Stats().Hedges
			}
			bottom0[i] = ch.runs[2].Load()
			lat[i] = make([]time.Duration, n)
		}
		testkit.Parallel(workers, n, func(r int) {
			for k := range chains {
				i := (r + k) % len(chains)
				code, d := chains[i].call()
				if code != http.StatusOK {
					b.Errorf("%s: status %d", variants[i].name, code)
				}
				lat[i][r] = d
			}
		})
		// One line per run: each metric's unit names its variant.
		for i, v := range variants {
			ch, l := chains[i], lat[i]
			slices.Sort(l)
			pct := func(p float64) float64 {
				return float64(l[min(int(p*float64(n)), n-1)]) / float64(time.Millisecond)
			}
			bottom := float64(ch.runs[2].Load()-bottom0[i]) / n
			b.ReportMetric(100*(bottom-1), v.name+":bottom-extra-%")
			var hedges float64
			for j, h := range ch.hedgers {
				hedges += float64(h.Stats().Hedges - before[i][j])
			}
			b.ReportMetric(hedges/n, v.name+":hedges/req")
			b.ReportMetric(pct(0.99), v.name+":p99-ms")
			b.ReportMetric(pct(0.999), v.name+":p99.9-ms")
		}
	}
}
