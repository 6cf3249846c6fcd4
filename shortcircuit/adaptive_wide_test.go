package shortcircuit

import (
	"testing"
	"time"
)

// A wide lower window (half the limit, after a fall all the way) whose round shows a
// clear gain, the handlers slowing by 13% across it (a trend: after a 3× slowdown,
// with jitter), says the knee is not far below: the next lower window goes a step
// below the limit, not half again. One whose round shows part of the throughput
// kept falls as before.
func TestAdaptiveLimitWideWindowEndsOnAClearGain(t *testing.T) {
	ms := func(x float64) float64 { return x * float64(time.Millisecond) }
	for _, c := range []struct {
		name      string
		lowS      float64 // the wide window's mean duration, ms
		wantLimit int
		wantBelow int
	}{
		{"a clear gain: the knee is near the limit", 30, 8, 7},
		{"no gain: the knee is at the lower window", 16, 4, 2},
	} {
		g := newAdaptive(DefaultAdaptiveLimit.withDefaults())
		g.limit, g.run, g.wide, g.calm = 8, -2, true, 0
		if lo := g.below(); lo != 4 {
			t.Fatalf("wide lower window at %d, want 4", lo)
		}
		g.lo = 4
		g.windows = [3]windowFigures{
			{n: 8, s: ms(30), demand: true},
			{n: 4, s: ms(c.lowS), demand: true},
			{n: 8, s: ms(34), demand: true},
		}
		g.decide()
		if g.limit != c.wantLimit || g.below() != c.wantBelow {
			t.Errorf("%s: limit %d, next lower window %d; want %d, %d", c.name, g.limit, g.below(), c.wantLimit, c.wantBelow)
		}
	}
}
