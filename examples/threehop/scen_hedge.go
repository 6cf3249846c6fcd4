package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/propagate"
)

// The hedging scenario: C's latency has a heavy tail (most answers in about 5 ms, 1%
// in about 25 ms, 0.5% in about 500 ms: a replica pausing, a cold cache), and B calls
// C concurrently, once plainly and once through package hedge, which sends a second
// copy once a call has taken longer than C's observed P99. Each variant first warms
// up (the hedge learns C's latencies), then the measured calls run.
const (
	hedgeWarmup      = 300
	hedgeCalls       = 2000
	hedgeConcurrency = 16
	hedgeBudget      = 2 * time.Second
)

// heavyTail draws C's latency for one request.
type heavyTail struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func (h *heavyTail) draw() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	jitter := func(d time.Duration) time.Duration { return d*8/10 + time.Duration(h.rng.Int64N(int64(d*4/10))) }
	switch p := h.rng.Float64(); {
	case p < 0.005:
		return jitter(500 * time.Millisecond)
	case p < 0.015:
		return jitter(25 * time.Millisecond)
	default:
		return jitter(5 * time.Millisecond)
	}
}

type hedgeResult struct {
	latencies []time.Duration // of the measured calls, sorted
	extraLoad float64         // C requests / calls − 1, measured calls only
	hedgeWins int
}

func (r hedgeResult) percentile(p float64) time.Duration {
	i := min(int(float64(len(r.latencies))*p), len(r.latencies)-1)
	return r.latencies[i]
}

func runHedge(e *env) ([]reading, error) {
	var res [2]hedgeResult
	for i, hedged := range []bool{false, true} {
		r, err := runHedgeOnce(e, hedged)
		if err != nil {
			return nil, err
		}
		res[i] = r
	}
	pct := func(p float64) (string, string) {
		return msPrecise(res[0].percentile(p)), msPrecise(res[1].percentile(p))
	}
	p50a, p50b := pct(0.50)
	p99a, p99b := pct(0.99)
	p999a, p999b := pct(0.999)
	return []reading{
		{"hedging", fmt.Sprintf("B → C latency p50 (%d calls, %d at once)", hedgeCalls, hedgeConcurrency), p50a, p50b},
		{"", "B → C latency p99", p99a, p99b},
		{"", "B → C latency p99.9", p999a, p999b},
		{"", "extra load on C (requests / calls − 1)", fmt.Sprintf("%.1f%%", 100*res[0].extraLoad), fmt.Sprintf("%.1f%% (%d hedges won)", 100*res[1].extraLoad, res[1].hedgeWins)},
	}, nil
}

func runHedgeOnce(e *env, hedged bool) (hedgeResult, error) {
	tail := &heavyTail{rng: rand.New(rand.NewPCG(7, 7))}
	var served atomic.Int64
	c := e.tel.serverHandler(svcC, propagate.NewMiddleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		t := time.NewTimer(tail.draw())
		defer t.Stop()
		select {
		case <-t.C:
			io.WriteString(w, "ok\n")
		case <-r.Context().Done(): // the other copy won, or the deadline passed: this copy stops
			writeResult(w, r.Context().Err()) // 499 cancelled, 504 deadline
		}
	})))
	cURL, stop, err := serveHTTP(c)
	if err != nil {
		return hedgeResult{}, err
	}
	defer stop()

	var wins atomic.Int64
	// The demo prints the trace of the first call the hedge won (its primary is the
	// loser, cancelled) and of the first call hedged that the primary won anyway.
	var tracedHedgeWon, tracedPrimaryWon sync.Once
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 2 * hedgeConcurrency
	defer base.CloseIdleConnections()
	var rt http.RoundTripper = propagate.NewTransport(base)
	if hedged {
		rt = hedge.NewTransport(rt, hedge.WithObserver(func(ctx context.Context, ev hedge.Event) {
			if ev.Winner > 0 {
				wins.Add(1)
			}
			if o, ok := ctx.Value(hedgeEventKey{}).(*hedgeEvent); ok {
				o.ev, o.seen = ev, true
			}
		}))
	}
	client := &http.Client{Transport: e.tel.transport(svcB, rt)}
	variant := "plain call"
	if hedged {
		variant = "through package hedge"
	}

	calls := func(n int, record bool) ([]time.Duration, error) {
		var mu sync.Mutex
		var lat []time.Duration
		var firstErr error
		var next atomic.Int64
		var wg sync.WaitGroup
		for range hedgeConcurrency {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					ctx, root := e.tel.provider(svcB).Tracer("threehop").Start(context.Background(), "hedging, "+variant)
					var o hedgeEvent
					ctx = context.WithValue(ctx, hedgeEventKey{}, &o)
					ctx, cancel := context.WithTimeout(ctx, hedgeBudget)
					start := time.Now()
					err := httpGet(ctx, client, cURL)
					took := time.Since(start)
					cancel()
					// Named after what happened to this call, once it is over.
					what := o.String()
					if !hedged {
						what = "the client " + clientSaw(err)
					}
					root.SetName("hedging, " + variant + ": " + what)
					root.End()
					if o.seen && o.ev.Attempts > 1 {
						switch o.ev.Winner {
						case 0:
							tracedPrimaryWon.Do(func() { e.trace("hedging: a hedged call the primary won", root) })
						case 1:
							tracedHedgeWon.Do(func() { e.trace("hedging: a call the hedge won", root) })
						}
					}
					mu.Lock()
					if err != nil && firstErr == nil {
						firstErr = err
					}
					if record {
						lat = append(lat, took)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return lat, firstErr
	}
	if _, err := calls(hedgeWarmup, false); err != nil {
		return hedgeResult{}, fmt.Errorf("hedging, %s: warm-up: %w", variant, err)
	}
	served.Store(0)
	wins.Store(0)
	lat, err := calls(hedgeCalls, true)
	if err != nil {
		return hedgeResult{}, fmt.Errorf("hedging, %s: %w", variant, err)
	}
	slices.Sort(lat)
	res := hedgeResult{latencies: lat, extraLoad: float64(served.Load())/hedgeCalls - 1, hedgeWins: int(wins.Load())}
	fmt.Fprintf(e.verbose, "  hedging, %s: p50 %s, p99 %s, p99.9 %s, max %s, extra load %.1f%%\n", variant,
		msPrecise(res.percentile(0.5)), msPrecise(res.percentile(0.99)), msPrecise(res.percentile(0.999)), msPrecise(lat[len(lat)-1]), 100*res.extraLoad)
	return res, nil
}

// hedgeEvent is where the hedge layer's observer leaves what it did with one call,
// found on the call's context.
type hedgeEvent struct {
	ev   hedge.Event
	seen bool
}

type hedgeEventKey struct{}

// String says what the hedge layer did with the call, for its root span's name.
func (o *hedgeEvent) String() string {
	switch {
	case !o.seen:
		return "the hedge layer did not report"
	case o.ev.Attempts <= 1 && o.ev.Skipped != "":
		return "not hedged (" + string(o.ev.Skipped) + ")"
	case o.ev.Attempts <= 1:
		return "not hedged, done within the hedge delay"
	case o.ev.Winner == 0:
		return "hedged, the primary won"
	case o.ev.Winner > 0:
		return "hedged, the hedge won"
	default:
		return "hedged, no copy answered"
	}
}
