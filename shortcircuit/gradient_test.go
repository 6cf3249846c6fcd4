package shortcircuit

import (
	"testing"
	"time"
)

// handler models a handler with 8 slots of a resource: below 8 at once a request
// takes base, above it waits its turn inside the handler.
func handler(base time.Duration, inflight int) time.Duration {
	return time.Duration(float64(base) * max(1, float64(inflight)/8))
}

// drive feeds g the completions of a saturated handler (as many running as the limit
// allows) for d, one completion per millisecond, from now; it returns the time
// reached and the limits seen after the first probe.
func drive(g *gradient, now time.Time, d time.Duration, base time.Duration) (time.Time, []int) {
	var seen []int
	limit := int(g.limit)
	for end := now.Add(d); now.Before(end); now = now.Add(time.Millisecond) {
		limit = g.update(now, handler(base, limit), limit)
		if g.minRTT > 0 && !g.probing {
			seen = append(seen, limit)
		}
	}
	return now, seen
}

func bounds(xs []int) (lo, hi int) {
	lo, hi = xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// Overloaded from the start, above the handler's 8 slots: the limit measures the
// unloaded latency at a concurrency of 3, then settles a little above 8, and stays
// there through the periodic probes.
func TestGradientFindsTheCapacity(t *testing.T) {
	g := newGradient(DefaultAdaptiveLimit.withDefaults())
	now, _ := drive(g, time.Unix(0, 0), 5*time.Second, 10*time.Millisecond)
	if g.minRTT != 10*time.Millisecond {
		t.Fatalf("minRTT = %v, want the unloaded 10ms", g.minRTT)
	}
	_, seen := drive(g, now, 100*time.Second, 10*time.Millisecond)
	lo, hi := bounds(seen[len(seen)/10:])
	t.Logf("limit in [%d, %d] over 100 s", lo, hi)
	if lo < 8 || hi > 20 {
		t.Fatalf("limit in [%d, %d] over 100 s; want it near the handler's 8 slots, in [8, 20]", lo, hi)
	}
}

// The handler turns twice as slow: the limit falls until the next probe measures the
// new unloaded latency, then settles where it was.
func TestGradientFollowsASlowerHandler(t *testing.T) {
	g := newGradient(DefaultAdaptiveLimit.withDefaults())
	now, _ := drive(g, time.Unix(0, 0), 20*time.Second, 10*time.Millisecond)
	before := int(g.limit)
	now, seen := drive(g, now, 2*time.Second, 20*time.Millisecond)
	if lo, _ := bounds(seen); lo >= before/2 {
		t.Fatalf("limit fell to %d from %d; want it at least halved", lo, before)
	}
	_, seen = drive(g, now, 60*time.Second, 20*time.Millisecond)
	if g.minRTT != 20*time.Millisecond {
		t.Fatalf("minRTT = %v after the next probe; want 20ms", g.minRTT)
	}
	if lo, hi := bounds(seen[len(seen)/2:]); lo < 8 || hi > 20 {
		t.Fatalf("limit in [%d, %d]; want it back near 8", lo, hi)
	}
}

// A limit used by fewer than half its slots does not grow.
func TestGradientIdleDoesNotGrow(t *testing.T) {
	g := newGradient(DefaultAdaptiveLimit.withDefaults())
	now := time.Unix(0, 0)
	for range 50 { // the first probe
		g.update(now, 10*time.Millisecond, 1)
		now = now.Add(time.Millisecond)
	}
	start := int(g.limit)
	for range 10000 {
		g.update(now, 10*time.Millisecond, 2)
		now = now.Add(time.Millisecond)
	}
	if n := int(g.limit); n > start {
		t.Fatalf("limit grew from %d to %d with 2 requests at once", start, n)
	}
}

func TestAdaptiveLimitDefaults(t *testing.T) {
	a := AdaptiveLimit{Min: 10, Max: 5, Initial: 1, Buffer: -1, ProbeConcurrency: 1}.withDefaults()
	d := DefaultAdaptiveLimit
	if a.Min != 10 || a.Max != 10 || a.Initial != 10 || a.Buffer != d.Buffer || a.Window != d.Window ||
		a.ProbeConcurrency != 10 || a.ProbeSamples != d.ProbeSamples || a.ProbeInterval != d.ProbeInterval {
		t.Fatalf("withDefaults = %+v", a)
	}
}
