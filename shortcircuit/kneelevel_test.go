package shortcircuit

import (
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/criticality"
)

// levelRun drives a pool of 4 slots × 100 ms behind a limiter built from c at load
// times its capacity, a critical request every 40% of the capacity's rate and the
// rest sheddable, for 5 s to settle and 10 s measured; it returns the critical
// requests' waits from arrival to the start of their work, and how many of all
// levels finished in time.
func levelRun(t *testing.T, c *config, load float64) (waits []time.Duration, ok int) {
	const slots, work = 4, 100 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		s := &sim{l: newLimiter(c), base: work, slow: 1, slots: make(chan struct{}, slots)}
		every, n := int(load/0.4), 0
		s.levelOf = func() criticality.Level {
			n++
			if n%every == 0 {
				return criticality.Critical
			}
			return criticality.Sheddable
		}
		rate := load * slots * float64(time.Second/work)
		rng := rand.New(rand.NewPCG(37, 4))
		poisson := func(d time.Duration) {
			for end := time.Now().Add(d); time.Now().Before(end); {
				s.wg.Go(func() { s.serve(1500 * time.Millisecond) })
				<-time.After(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
			}
		}
		poisson(5 * time.Second)
		s.mu.Lock()
		s.waits, s.ok = map[criticality.Level][]time.Duration{}, 0
		s.mu.Unlock()
		poisson(10 * time.Second)
		s.wg.Wait()
		waits, ok = s.waits[criticality.Critical], s.ok
	})
	return waits, ok
}

// Over a pool of 4 slots × 100 ms offered 4× and 10× what it serves, with a
// critical request every 40% of its capacity and sheddable ones the rest, the limit
// holds a step above the knee (5 over the 4 slots). The request let in on that step
// waits inside the handler for a slot, in the handler's order, not by level: a
// sheddable one there takes the next slot to free before a critical one that came
// after it, which then waits for the one after. With the step open to every level,
// at 4× the critical requests waited 15 ms (a seventh of a service time) longer on
// average than under a static limit of 4, their median wait twice as long (51 ms,
// 25 ms), their p99 18 ms longer. The step is the highest level's: the critical
// requests wait no more than a twentieth of a service time longer than under the
// static limit at the slots, on average and at the 99th percentile, and as many
// requests finish in time.
func TestAdaptiveLimitStepAboveTheKneeIsTheHighestLevels(t *testing.T) {
	const work = 100 * time.Millisecond
	for _, load := range []float64{4, 10} {
		a := DefaultAdaptiveLimit.withDefaults()
		got, ok := levelRun(t, &config{adaptiveLimit: &a, maxQueue: -1}, load)
		want, okStatic := levelRun(t, &config{maxConcurrency: 4, maxQueue: -1}, load)
		mean, meanStatic := meanOf(got), meanOf(want)
		p99, p99Static := waitAt(got, 0.99), waitAt(want, 0.99)
		t.Logf("%g×: critical requests wait %v on average, %v at p99; static limit 4: %v, %v; finished in time %d, static %d",
			load, mean, p99, meanStatic, p99Static, ok, okStatic)
		if mean > meanStatic+work/20 || p99 > p99Static+work/20 {
			t.Errorf("%g×: the critical requests waited %v on average and %v at p99; want at most a twentieth of a service time (%v) over the static limit's %v and %v",
				load, mean, p99, work/20, meanStatic, p99Static)
		}
		if ok < okStatic {
			t.Errorf("%g×: %d finished in time; want at least the static limit's %d", load, ok, okStatic)
		}
	}
}

// A highest level too rare to fill the reserved step leaves the concurrency at
// the knee through every window, and the rounds would measure nothing: a knee that
// rose would not be found. A round that measured nothing with the step reserved
// opens it to every level for the next one. With one critical request in fifty,
// the limit follows a knee that rises from 8 to 16 within 2 s, as it does with one
// level (without the open round it had not moved in 4 s).
func TestAdaptiveLimitFindsARisingKneeUnderARareHighestLevel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(DefaultAdaptiveLimit, 10*time.Millisecond, 8)
		n := 0
		s.levelOf = func() criticality.Level {
			n++
			if n%50 == 0 {
				return criticality.Critical
			}
			return criticality.Sheddable
		}
		s.drive(1600, 3*time.Second)
		before := s.limit()
		s.set(16, 1)
		seen := s.drive(3200, 4*time.Second)
		s.wg.Wait()
		rest, at := settled(seen, 14, 21)
		t.Logf("knee 8 → 16: the limit was %d; in [14, 21] after %v", before, at)
		if rest == nil || at > 2*time.Second {
			t.Fatalf("the limit not in [14, 21] within 2 s of the knee rising to 16 (after %v); samples %v", at, seen)
		}
		if lo, _ := bounds(rest); lo < 14 {
			t.Errorf("once there, the limit fell to %d; want it kept at 14 or more", lo)
		}
	})
}

// meanOf is the mean of ds; 0 for none.
func meanOf(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// waitAt is the q-quantile of ds (sorted in place); 0 for none.
func waitAt(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[int(q*float64(len(ds)-1))]
}
