package shortcircuit

import (
	"context"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/criticality"
)

// sim is a handler behind a limiter with the adaptive limit, in fake time (it runs
// only inside synctest bubbles, whose clock its waits advance): its service time is
// base × slow × max(1, n/knee), n the handlers running when it starts, so beyond
// knee at once every request slows in proportion (throughput stays knee/base) and
// slow slows every request whatever the concurrency.
type sim struct {
	l    *limiter
	base time.Duration

	wg      sync.WaitGroup // the requests sent
	mu      sync.Mutex
	running int
	knee    int
	slow    float64
	ok      int            // finished within their budget
	jitter  func() float64 // nil: none; else a factor on each request's duration
	// gap is the handoff: the time from a request's admission to its start in
	// the handler (a goroutine waking, the request read), when it holds a slot
	// of the limit but not of the handler.
	gap time.Duration
	// slots, when set, makes the handler a pool of slots (a connection pool, a
	// dependency's workers): a request waits inside the handler, in order, for
	// one of them, then works base × slow; knee is not used (running counts
	// the requests holding a slot).
	slots chan struct{}
	// levelOf, when set, gives each request its level (criticality.With;
	// called under mu);
	// waits then records, per level, each admitted request's wait from its
	// arrival to the start of its work (a pool slot's, with slots).
	levelOf func() criticality.Level
	waits   map[criticality.Level][]time.Duration
}

func newSim(a AdaptiveLimit, base time.Duration, knee int) *sim {
	a = a.withDefaults()
	c := &config{adaptiveLimit: &a, maxQueue: -1}
	return &sim{l: newLimiter(c), base: base, knee: knee, slow: 1}
}

func (s *sim) set(knee int, slow float64) {
	s.mu.Lock()
	s.knee, s.slow = knee, slow
	s.mu.Unlock()
}

// serve is one request with the given budget, arriving now.
func (s *sim) serve(budget time.Duration) {
	now := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(budget))
	defer cancel()
	level := criticality.Critical
	if s.levelOf != nil {
		s.mu.Lock()
		level = s.levelOf()
		s.mu.Unlock()
		ctx = criticality.With(ctx, level)
	}
	e := s.l.acquire(ctx, now, now.Add(budget), true, false)
	if e.decision != Admitted {
		return
	}
	if s.gap > 0 {
		<-time.After(s.gap)
	}
	start := time.Now()
	if s.slots != nil {
		s.slots <- struct{}{}
	}
	s.mu.Lock()
	if s.waits != nil {
		s.waits[level] = append(s.waits[level], time.Since(now))
	}
	s.running++
	x := float64(s.base) * s.slow
	if s.slots == nil {
		x *= max(1, float64(s.running)/float64(s.knee))
	}
	d := time.Duration(x)
	if s.jitter != nil {
		d = time.Duration(float64(d) * s.jitter())
	}
	s.mu.Unlock()
	<-time.After(d)
	if s.slots != nil {
		<-s.slots
	}
	end := time.Now()
	s.mu.Lock()
	s.running--
	if !end.After(now.Add(budget)) {
		s.ok++
	}
	s.mu.Unlock()
	s.l.releaseAt(e.slot, end, end.Sub(start))
}

// limit is the operating limit (the upper window's).
func (s *sim) limit() int {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if s.l.adapt == nil {
		return s.l.limit
	}
	return s.l.adapt.limit
}

// drive sends requests at rate per second with a 200 ms budget for d, sampling the
// operating limit every 10 ms, and returns the samples. It does not wait for the
// requests it sent: the next drive's follow them without a gap (wait ends a test).
func (s *sim) drive(rate float64, d time.Duration) []int {
	return s.driveWithin(rate, d, 200*time.Millisecond)
}

// driveWithin is drive with the given budget.
func (s *sim) driveWithin(rate float64, d, budget time.Duration) []int {
	var seen []int
	every := time.Duration(float64(time.Second) / rate)
	end := time.Now().Add(d)
	next := time.Now().Add(10 * time.Millisecond)
	for now := time.Now(); now.Before(end); now = time.Now() {
		s.wg.Go(func() { s.serve(budget) })
		if !now.Before(next) {
			seen = append(seen, s.limit())
			next = next.Add(10 * time.Millisecond)
		}
		<-time.After(every)
	}
	return seen
}

func bounds(xs []int) (lo, hi int) {
	lo, hi = xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// settled is the samples from the first one in [lo, hi] on, and when it came (the
// samples are 10 ms apart).
func settled(xs []int, lo, hi int) ([]int, time.Duration) {
	for i, x := range xs {
		if x >= lo && x <= hi {
			return xs[i:], time.Duration(i) * 10 * time.Millisecond
		}
	}
	return nil, time.Duration(len(xs)) * 10 * time.Millisecond
}

// At twice the capacity of a handler with a knee at 8 (8 × 10 ms: 800 a second), the
// limit comes down from 20 to about 8 and stays there.
func TestAdaptiveLimitFindsTheKnee(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(DefaultAdaptiveLimit, 10*time.Millisecond, 8)
		seen := s.drive(1600, 6*time.Second)
		rest, at := settled(seen, 7, 11)
		if rest == nil || at > 2*time.Second {
			t.Fatalf("limit not in [7, 11] within 2 s: reached it after %v; samples %v", at, seen)
		}
		if lo, hi := bounds(rest); lo < 7 || hi > 11 {
			t.Fatalf("after reaching the knee at %v, the limit ranged over [%d, %d]; want [7, 11]", at, lo, hi)
		}
		s.wg.Wait()
	})
}

// Every request turns 3× slower, however many run (a step from 3 s on, for 5 s), then
// a 1 s 2× transient: the handler keeps its 8 slots, and so does the limit. The rule
// this one replaced (a gradient against a remembered unloaded latency) cut the limit
// by half or more within the first windows of the slowdown.
func TestAdaptiveLimitHoldsThroughASlowdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(DefaultAdaptiveLimit, 10*time.Millisecond, 8)
		s.drive(1600, 3*time.Second)
		before := s.limit()
		s.set(8, 3)
		slow := s.drive(1600/3, 5*time.Second) // still twice the capacity, now 267 a second
		s.set(8, 2)
		transient := s.drive(800, time.Second)
		s.set(8, 1)
		after := s.drive(1600, 2*time.Second)
		s.wg.Wait()
		// What the 8 slots can serve: 800 a second, 267 during the step, 400 during
		// the transient. The lower windows cost a little of it.
		if want := 800*3 + 267*5 + 400 + 800*2; s.ok < want*9/10 {
			t.Errorf("%d answered in time; want at least 90%% of the %d the slots can serve", s.ok, want)
		}
		t.Logf("%d answered in time of the %d the slots can serve", s.ok, 800*3+267*5+400+800*2)
		for name, xs := range map[string][]int{"3× step": slow, "2× transient": transient, "after": after} {
			if lo, hi := bounds(xs); lo < 8 || hi > 12 {
				t.Errorf("%s: limit in [%d, %d] (it was %d before); want it kept in [8, 12]", name, lo, hi, before)
			}
		}
	})
}

// The knee moves: from 8 to 4 (half the resource gone), then to 16. Within 2 s of
// each change the limit is near the new knee, and it stays near it.
func TestAdaptiveLimitFollowsAMovingKnee(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(DefaultAdaptiveLimit, 10*time.Millisecond, 8)
		s.drive(1600, 3*time.Second)
		for _, c := range []struct{ knee, lo, hi int }{{4, 3, 6}, {16, 14, 21}, {8, 7, 11}} {
			s.set(c.knee, 1)
			seen := s.drive(2*float64(c.knee)*100, 4*time.Second)
			rest, at := settled(seen, c.lo, c.hi)
			t.Logf("knee %d: limit in [%d, %d] after %v", c.knee, c.lo, c.hi, at)
			if rest == nil || at > 2*time.Second {
				t.Fatalf("knee %d: limit not in [%d, %d] within 2 s (after %v); samples %v", c.knee, c.lo, c.hi, at, seen)
			}
			if lo, hi := bounds(rest); lo < c.lo || hi > c.hi {
				t.Errorf("knee %d: once there, the limit ranged over [%d, %d]; want [%d, %d]", c.knee, lo, hi, c.lo, c.hi)
				t.Logf("samples %v", seen)
			}
		}
		s.wg.Wait()
	})
}

// Below the capacity the load, not the limit, keeps the concurrency low: the limit
// does not grow, and does not fall for want of evidence.
func TestAdaptiveLimitIdleHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(AdaptiveLimit{Initial: 12}, 10*time.Millisecond, 8)
		seen := s.drive(300, 5*time.Second)
		if lo, hi := bounds(seen); lo < 10 || hi > 12 {
			t.Fatalf("limit in [%d, %d] at 300 a second; want it held near 12", lo, hi)
		}
		s.wg.Wait()
	})
}

func TestAdaptiveLimitDefaults(t *testing.T) {
	a := AdaptiveLimit{Min: 10, Max: 5, Initial: 1, Tolerance: -1}.withDefaults()
	d := DefaultAdaptiveLimit
	if a.Min != 10 || a.Max != 10 || a.Initial != 10 || a.Tolerance != d.Tolerance || a.Samples != d.Samples {
		t.Fatalf("withDefaults = %+v", a)
	}
}

// steady drives a sim at twice the capacity of a knee at 8 for 2 s, then measures 4 s:
// the share of the time the limit in force was below the knee (the cost of probing
// below it), and above it by more than the step of headroom the rule keeps
// (requests queued inside the handler for nothing), and the requests
// answered in time.
func steady(t *testing.T, s *sim) (below, above float64, ok int) {
	s.drive(1600, 2*time.Second)
	s.wg.Wait()
	s.ok = 0
	var n, lo, hi int
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
			s.l.mu.Lock()
			n++
			switch {
			case s.l.limit < s.knee:
				lo++
			case s.l.limit > s.knee+max(s.knee/8, 1):
				hi++
			}
			s.l.mu.Unlock()
		}
	}()
	s.drive(1600, 4*time.Second)
	close(done)
	s.wg.Wait()
	return float64(lo) / float64(n), float64(hi) / float64(n), s.ok
}

// The first rule (removed) probed below the knee every round and grew straight back
// into a limit it had just found too high. Its figures in steady over its last five
// runs beside the current rule: below the knee 13.5–14.6% of the time, above it by
// more than a step never; the least is kept.
const firstRuleBelow, firstRuleAbove = 0.135, 0.0

// Settled at the knee, the limit probes below it less often than the first rule
// did, and answers within 1% of a static limit set to the knee.
func TestAdaptiveLimitSettledProbesLess(t *testing.T) {
	var now [3]float64
	var static int
	synctest.Test(t, func(t *testing.T) {
		lo, hi, ok := steady(t, newSim(DefaultAdaptiveLimit, 10*time.Millisecond, 8))
		now = [3]float64{lo, hi, float64(ok)}
	})
	synctest.Test(t, func(t *testing.T) {
		c := &config{maxConcurrency: 8, maxQueue: -1}
		s := &sim{l: newLimiter(c), base: 10 * time.Millisecond, knee: 8, slow: 1}
		_, _, static = steady(t, s)
	})
	t.Logf("time below the knee %.1f%% (first rule %.1f%%), above %.1f%% (%.1f%%); answered %.0f, static limit 8 %d",
		100*now[0], 100*firstRuleBelow, 100*now[1], 100*firstRuleAbove, now[2], static)
	if now[0] > firstRuleBelow*3/4 {
		t.Errorf("below the knee %.1f%% of the time; want at most three quarters of the first rule's %.1f%%", 100*now[0], 100*firstRuleBelow)
	}
	if now[1] > firstRuleAbove {
		t.Errorf("above the knee %.1f%% of the time; want no more than the first rule's %.1f%%", 100*now[1], 100*firstRuleAbove)
	}
	if now[2] < 0.99*float64(static) {
		t.Errorf("%.0f answered in time; want within 1%% of the static limit's %d", now[2], static)
	}
}

// A request takes a moment from its admission to its start in the handler (a
// goroutine waking; on the loopback bench about half a millisecond). A limit at the
// knee leaves the handler one short for that moment after every end, and the lower
// window of the rule that settled at the knee ran a step below it. Settled a step
// above the knee, the adaptive limit answers more than a static limit at the knee,
// and as many as a static limit a step above it.
func TestAdaptiveLimitKeepsAStepAboveTheKnee(t *testing.T) {
	for _, knee := range []int{4, 8} {
		step := max(knee/8, 1)
		run := func(c *config) (ok int, seen []int) {
			synctest.Test(t, func(t *testing.T) {
				s := &sim{l: newLimiter(c), base: 10 * time.Millisecond, knee: knee, slow: 1, gap: 500 * time.Microsecond}
				rate := 2 * float64(knee) * 100
				s.drive(rate, 6*time.Second)
				s.mu.Lock()
				s.ok = 0 // the measure follows the warm-up without a lull
				s.mu.Unlock()
				seen = s.drive(rate, 6*time.Second)
				s.wg.Wait()
				ok = s.ok
			})
			return ok, seen
		}
		a := DefaultAdaptiveLimit.withDefaults()
		adaptive, seen := run(&config{adaptiveLimit: &a, maxQueue: -1})
		atKnee, _ := run(&config{maxConcurrency: knee, maxQueue: -1})
		above, _ := run(&config{maxConcurrency: knee + step, maxQueue: -1})
		lo, hi := bounds(seen)
		t.Logf("knee %d: answered %d; static limit %d: %d, %d: %d; the limit in [%d, %d]", knee, adaptive, knee, atKnee, knee+step, above, lo, hi)
		if adaptive <= atKnee || float64(adaptive) < 0.99*float64(above) {
			t.Errorf("knee %d: %d answered in time; want more than the static limit %d's %d, and within 1%% of the static limit %d's %d",
				knee, adaptive, knee, atKnee, knee+step, above)
		}
		if lo < knee || hi > knee+2*step {
			t.Errorf("knee %d: the limit in [%d, %d]; want it in [%d, %d]", knee, lo, hi, knee, knee+2*step)
		}
	}
}

// At small limits the recheck's lower window still goes a step below the knee: a
// knee that falls from 2 to 1 under a headroom of one (a limit of 3) is found
// within 2 s.
func TestAdaptiveLimitFollowsASmallKnee(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(DefaultAdaptiveLimit, 10*time.Millisecond, 2)
		s.drive(400, 4*time.Second)
		before := s.limit()
		s.set(1, 1)
		seen := s.drive(200, 4*time.Second)
		s.wg.Wait()
		rest, at := settled(seen, 1, 2)
		t.Logf("knee 2 → 1: the limit was %d; in [1, 2] after %v", before, at)
		if rest == nil || at > 2*time.Second {
			t.Fatalf("limit not in [1, 2] within 2 s of the knee falling to 1 (after %v); samples %v", at, seen)
		}
		if lo, hi := bounds(rest); hi > 2 {
			t.Errorf("once there, the limit ranged over [%d, %d]; want [1, 2]", lo, hi)
		}
	})
}

// A limit far above a pool of slots the handler waits for inside (a dependency's
// workers) comes down in a few rounds. The requests admitted under the previous
// window's limit wait behind the queue it let into the handler; a window that
// measured them read the throughput of a limit it was not running and fell a step
// at a time: from 20 over 8 slots it took 1.4 s on the loopback bench, and from 20
// over 4 slots of 30 ms (150 ms windows) 3 to 4 s in a trial.
func TestAdaptiveLimitComesDownToAPoolOfSlots(t *testing.T) {
	for _, c := range []struct {
		slots        int
		work, within time.Duration
		min, max     int // where it stays once there (as the moving knee's test)
	}{{8, 10 * time.Millisecond, 500 * time.Millisecond, 7, 11}, {4, 30 * time.Millisecond, 1500 * time.Millisecond, 3, 6}} {
		synctest.Test(t, func(t *testing.T) {
			s := newSim(DefaultAdaptiveLimit, c.work, 0)
			s.slots = make(chan struct{}, c.slots)
			rate := 2 * float64(c.slots) * float64(time.Second) / float64(c.work)
			seen := s.drive(rate, 4*time.Second)
			s.wg.Wait()
			lo, hi := c.slots, c.slots+2*max(c.slots/8, 1)
			rest, at := settled(seen, lo, hi)
			t.Logf("%d slots × %v: from %d, in [%d, %d] after %v", c.slots, c.work, DefaultAdaptiveLimit.Initial, lo, hi, at)
			if rest == nil || at > c.within {
				t.Fatalf("%d slots × %v: the limit not in [%d, %d] within %v (after %v); samples %v", c.slots, c.work, lo, hi, c.within, at, seen)
			}
			if l, h := bounds(rest); l < c.min || h > c.max {
				t.Errorf("%d slots × %v: once there, the limit ranged over [%d, %d]; want [%d, %d]", c.slots, c.work, l, h, c.min, c.max)
			}
		})
	}
}

// inForce samples the limit in force (a lower window's included) every 5 ms until
// stop is closed, and returns the samples once done is.
func (s *sim) inForce(stop <-chan struct{}) <-chan []int {
	out := make(chan []int, 1)
	go func() {
		var seen []int
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				out <- seen
				return
			case <-t.C:
				s.l.mu.Lock()
				seen = append(seen, s.l.adapt.inForce())
				s.l.mu.Unlock()
			}
		}
	}()
	return out
}

// Once the limit has measured the handler's unloaded speed, a lower window that
// runs at it was at the knee, not above it: the limit settles a step above
// without sending a wider window below the knee to find out. Settled at a knee
// of 8, and following it to 4, the limit in force goes at most a step below the
// knee (the rule before went to half the limit: a wide window after every fall
// that reached its lower window).
func TestAdaptiveLimitProbesNoFurtherThanAStepBelowTheKnee(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(DefaultAdaptiveLimit, 10*time.Millisecond, 8)
		s.drive(1600, 2*time.Second) // from 20 to the knee: the first windows go wide
		for _, knee := range []int{8, 4} {
			s.set(knee, 1)
			stop := make(chan struct{})
			got := s.inForce(stop)
			s.drive(2*float64(knee)*100, 3*time.Second)
			close(stop)
			seen := <-got
			lo, hi := bounds(seen)
			t.Logf("knee %d: the limit in force in [%d, %d]", knee, lo, hi)
			if lo < knee-max(knee/8, 1) {
				t.Errorf("knee %d: the limit in force went down to %d; want at least %d", knee, lo, knee-max(knee/8, 1))
			}
		}
		s.wg.Wait()
	})
}

// Headroom 1 asks for a limit twice the knee (a backend that keeps working while the
// process that feeds it stalls): the limit settles near 16 over a knee of 8, follows
// the knee down to 4 and back within 2 s, and its rechecks go no lower than a step
// below the knee.
func TestAdaptiveLimitHeadroom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(AdaptiveLimit{Headroom: 1}, 10*time.Millisecond, 8)
		stop := make(chan struct{})
		forces := s.inForce(stop)
		s.drive(1600, 2*time.Second)
		for _, c := range []struct{ knee, lo, hi int }{{8, 14, 18}, {4, 7, 10}, {8, 14, 18}} {
			s.set(c.knee, 1)
			seen := s.drive(1600, 4*time.Second)
			rest, at := settled(seen, c.lo, c.hi)
			t.Logf("knee %d: limit in [%d, %d] after %v", c.knee, c.lo, c.hi, at)
			if rest == nil || at > 2*time.Second {
				t.Fatalf("knee %d: limit not in [%d, %d] within 2 s (after %v); samples %v", c.knee, c.lo, c.hi, at, seen)
			}
			if lo, hi := bounds(rest); lo < c.lo || hi > c.hi {
				t.Errorf("knee %d: once there, the limit ranged over [%d, %d]; want [%d, %d]; samples %v", c.knee, lo, hi, c.lo, c.hi, seen)
			}
		}
		close(stop)
		f := <-forces
		s.wg.Wait()
		// The last 3 s at the knee of 8: the limit in force (a lower window's
		// included) stays above a step below the knee.
		if lo, _ := bounds(f[len(f)-600:]); lo < 7 { // a sample every 5 ms
			t.Errorf("the limit in force fell to %d at a knee of 8; want no lower than 7", lo)
		}
	})
}

func TestAdaptiveLimitHeadroomDefaults(t *testing.T) {
	for _, h := range []float64{-1, math.NaN(), math.Inf(1), 11} {
		if a := (AdaptiveLimit{Headroom: h}).withDefaults(); a.Headroom != 0 {
			t.Errorf("Headroom %v: withDefaults made it %v; want 0 (a step)", h, a.Headroom)
		}
	}
	if a := (AdaptiveLimit{Headroom: 0.5}).withDefaults(); a.Headroom != 0.5 {
		t.Errorf("Headroom 0.5: withDefaults made it %v", a.Headroom)
	}
}

// A limit far above a pool of slow slots (4 × 100 ms, 40 a second) comes down to
// them within a second and a half, fifteen of their durations, under 4× and 10× the
// load they can serve: the requests it lets in above the slots wait inside the
// handler in arrival order, where the guard's queue cannot order them by level.
// Coming down in rounds of windows as long as the queue inside the handler (half a
// second at a limit of 20), with a lower window half below the limit each round
// (20, 10, 5), it took over 4 s.
func TestAdaptiveLimitComesDownToSlowSlotsFast(t *testing.T) {
	for _, load := range []float64{4, 10} {
		synctest.Test(t, func(t *testing.T) {
			const slots, work = 4, 100 * time.Millisecond
			s := newSim(DefaultAdaptiveLimit, work, 0)
			s.slots = make(chan struct{}, slots)
			seen := s.driveWithin(load*slots*float64(time.Second/work), 5*time.Second, 1500*time.Millisecond)
			s.wg.Wait()
			rest, at := settled(seen, 4, 6)
			t.Logf("%g×: from %d, in [4, 6] after %v", load, DefaultAdaptiveLimit.Initial, at)
			if rest == nil || at > 20*work {
				t.Fatalf("%g×: the limit not in [4, 6] within %v (after %v); samples %v", load, 20*work, at, seen)
			}
			if l, h := bounds(rest); l < 3 || h > 6 {
				t.Errorf("%g×: once there, the limit ranged over [%d, %d]; want [3, 6]; samples %v", load, l, h, seen)
			}
		})
	}
}
