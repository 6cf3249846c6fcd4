package hedge_test

import (
	"context"
	"math"
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
