package hedge_test

import (
	"context"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/hedge"
)

// spread is a latency spread evenly over the logarithms of 4..64 ms by the primary's
// number (a fixed permutation of 1000 steps), as the window's bins are: its
// q-quantile is spreadQuantile(q).
func spread(n int) time.Duration {
	return spreadQuantile(float64(n*7919%1000) / 1000)
}

func spreadQuantile(q float64) time.Duration {
	return time.Duration(float64(4*time.Millisecond) * math.Exp2(4*q))
}

// extraLoadRun sends n calls one at a time through a Hedger made with opts to a
// backend whose primaries take spread(their number) and whose hedges take 1 ms, and
// returns the hedges sent per primary in the second half of the run and the delay
// at its end.
func extraLoadRun(t *testing.T, n int, opts ...hedge.Option) (share float64, delay time.Duration) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		var primaries atomic.Int64
		b := &latencyBackend{latency: func(attempt, _ int) time.Duration {
			if attempt > 0 {
				return time.Millisecond
			}
			return spread(int(primaries.Add(1)))
		}}
		h := hedge.New(opts...)
		rt := h.Transport(b)
		var half hedge.Stats
		for i := range n {
			if i == n/2 {
				half = h.Stats()
			}
			get(context.Background(), rt)
			synctest.Wait()
		}
		s := h.Stats()
		share = float64(s.Hedges-half.Hedges) / float64(s.Primaries-half.Primaries)
		delay, _ = h.Delay("backend.test")
	})
	return share, delay
}

// A primary cut short by its hedge's success counts in the window above the delay,
// even when the hedge answered within the window's resolution: were it counted at
// its time up to the cut, inside the delay's own bin, the window would hold no
// latency above the delay, and the percentile could only go down, drifting below the
// true one and hedging more than the slowest 1 − p.
func TestCutPrimariesDoNotPinTheDelay(t *testing.T) {
	share, delay := extraLoadRun(t, 2000, hedge.WithPercentile(0.95))
	if share < 0.035 || share > 0.065 {
		t.Errorf("P95: hedges per primary %.4f; want about 0.05", share)
	}
	if want := spreadQuantile(0.95); delay < want*96/100 {
		t.Errorf("P95: delay %v; want about %v", delay, want)
	}
}

// shareRun sends n calls one at a time through a Hedger made with opts to a backend
// whose primaries take 5 ms until the warm-up ends (call 100) and then take 100 ms
// once in every 20 calls, its hedges 1 ms: the window's percentile lies far below
// the new tail, and every slow primary wants a hedge, 5% of the calls. It reports
// the first call after which the hedges sent exceed share × primaries, or -1, the
// Hedger's Stats and its delay at the end.
func shareRun(t *testing.T, n int, share float64, opts ...hedge.Option) (over int, s hedge.Stats, delay time.Duration) {
	t.Helper()
	over = -1
	synctest.Test(t, func(t *testing.T) {
		var primaries atomic.Int64
		b := &latencyBackend{latency: func(attempt, _ int) time.Duration {
			if attempt > 0 {
				return time.Millisecond
			}
			if p := primaries.Add(1); p > 100 && p%20 == 0 {
				return 100 * time.Millisecond
			}
			return 5 * time.Millisecond
		}}
		h := hedge.New(opts...)
		rt := h.Transport(b)
		for i := range n {
			get(context.Background(), rt)
			synctest.Wait()
			if s = h.Stats(); over < 0 && float64(s.Hedges) > share*float64(s.Primaries) {
				over = i
			}
		}
		delay, _ = h.Delay("backend.test")
	})
	return over, s, delay
}

// A cap of twice the percentile's share holds a learned delay within it over any
// stretch of calls from the start, whatever the window says: when the tail moves
// beyond what the window has seen, the delay lags and every slow call wants a hedge
// until it catches up. The account starts empty, filled by the warm-up's primaries,
// and the primaries the cap leaves alone teach the window the new tail. The default
// cap, 15%, hedges every slow call meanwhile.
func TestACapOfTwiceTheShareHoldsFromTheStart(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []hedge.Option
		share float64
	}{
		{"P99", []hedge.Option{hedge.WithMaxExtraLoad(0.02)}, 0.02},
		{"extra load 1.5%", []hedge.Option{hedge.WithExtraLoad(0.015), hedge.WithMaxExtraLoad(0.03)}, 0.03},
	} {
		t.Run(tc.name, func(t *testing.T) {
			over, s, delay := shareRun(t, 3000, tc.share, tc.opts...)
			if over >= 0 {
				t.Errorf("hedges passed %.1f%% of the primaries after call %d; at the end %d hedges for %d primaries", 100*tc.share, over, s.Hedges, s.Primaries)
			}
			if s.RefusedByCap == 0 {
				t.Errorf("no hedge refused by the cap (%d hedges for %d primaries): the run does not test it", s.Hedges, s.Primaries)
			}
			if delay < 96*time.Millisecond {
				t.Errorf("delay at the end %v; want the new tail, 100 ms", delay)
			}
		})
	}
	d := 10 * time.Millisecond
	for name, opts := range map[string][]hedge.Option{
		"default":     nil,
		"fixed delay": {hedge.WithDelay(hedge.Delay{Initial: d, Min: d, Max: d, MinSamples: 1 << 30})},
	} {
		if over, s, _ := shareRun(t, 3000, 0.045, opts...); over < 0 {
			t.Errorf("%s: %d hedges for %d primaries; want every slow call hedged (5%%)", name, s.Hedges, s.Primaries)
		}
	}
}

// When the account is short, its tokens go mostly to the calls that stay slow: a
// call whose hedge found no token tries again after each further delay. Here half
// the calls pass the delay by a little (a tail that has moved, as after a shift)
// and 2% stall for a second; the cap has tokens for 5%. Taken first come, first
// served at the delay, the tokens went to the calls a little slow, and 34-37 of
// the 40 stalls were never hedged; a stall now has a hundred tries to a little
// slow call's one (1-4 left unhedged in runs of this test).
func TestTheCapsTokensGoToTheCallsThatStaySlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var primaries atomic.Int64
		b := &latencyBackend{latency: func(attempt, _ int) time.Duration {
			if attempt > 0 {
				return time.Millisecond
			}
			switch p := primaries.Add(1); {
			case p%50 == 0:
				return time.Second
			case p%2 == 0:
				return 20 * time.Millisecond
			}
			return 2 * time.Millisecond
		}}
		d := 10 * time.Millisecond
		h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: d, Min: d, Max: d, MinSamples: 1 << 30}), hedge.WithMaxExtraLoad(0.05))
		rt := h.Transport(b)
		var stalled atomic.Int64 // calls that took the stall's second
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				for range 100 {
					start := time.Now()
					get(context.Background(), rt)
					if time.Since(start) >= 900*time.Millisecond {
						stalled.Add(1)
					}
				}
			})
		}
		wg.Wait()
		s := h.Stats()
		if n := stalled.Load(); n > 10 {
			t.Errorf("%d of the 40 stalled calls waited out their stall; want nearly every one hedged (stats %+v)", n, s)
		}
		if limit := uint64(0.05*float64(s.Primaries)) + hedge.Burst; s.Hedges > limit {
			t.Errorf("%d hedges for %d primaries; the cap allows %d", s.Hedges, s.Primaries, limit)
		}
	})
}

// A call whose primary fails non-fatally just as its timer fires, when the cap has
// no token for the hedge, ends with the failure and its memory is reused only once
// the timer's callback is done with it: the failure does not re-arm a timer that
// has just fired. (It did once, and the callback then ran on a call reused for
// another: a nil dereference.)
func TestACapRefusalAtTheTimersInstantReusesNothingEarly(t *testing.T) {
	for _, concurrent := range []int{1, 8} {
		synctest.Test(t, func(t *testing.T) {
			d := 10 * time.Millisecond
			b := &latencyBackend{latency: func(int, int) time.Duration { return d }}
			failing := http.RoundTripper(roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if _, err := b.RoundTrip(r); err != nil {
					return nil, err
				}
				return response(r, 503, nil), nil
			}))
			h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: d, Min: d, Max: d, MinSamples: 1 << 30}), hedge.WithMaxExtraLoad(0.001))
			rt := h.Transport(failing)
			var wg sync.WaitGroup
			for range concurrent {
				wg.Go(func() {
					for range 200 {
						get(context.Background(), rt)
					}
				})
			}
			wg.Wait()
			synctest.Wait()
		})
	}
}
