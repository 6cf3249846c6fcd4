package shortcircuit

import (
	"testing"
	"time"
)

func TestGradientRisesWhileLatencyHolds(t *testing.T) {
	g := newGradient(AdaptiveLimit{Min: 1, Max: 200, Initial: 20}.withDefaults())
	n := 20
	for range 200 {
		n = g.update(10*time.Millisecond, n) // every slot busy, the latency flat
	}
	if n <= 40 || n > 200 {
		t.Fatalf("limit after 200 flat samples at full use = %d; want it grown well above 20, within 200", n)
	}
	if g.update(10*time.Millisecond, 1) != n {
		t.Fatal("a sample from an idle limit moved it")
	}
}

func TestGradientFallsWhenTheHandlerSlows(t *testing.T) {
	g := newGradient(AdaptiveLimit{Min: 2, Max: 1000, Initial: 100}.withDefaults())
	n := 100
	for range 1000 {
		n = g.update(10*time.Millisecond, n)
	}
	before := n
	for range 30 {
		n = g.update(40*time.Millisecond, n) // the handler is 4 times slower
	}
	if n > before/2 {
		t.Fatalf("limit %d after 30 slow samples, from %d; want it at least halved", n, before)
	}
	for range 10000 {
		n = g.update(time.Second, n)
	}
	if n < 2 {
		t.Fatalf("limit %d below Min", n)
	}
}

func TestAdaptiveLimitDefaults(t *testing.T) {
	a := AdaptiveLimit{Min: 10, Max: 5, Initial: 1, Tolerance: 0.5, Smoothing: 2}.withDefaults()
	if a.Min != 10 || a.Max != 10 || a.Initial != 10 || a.Tolerance != 1.5 || a.Smoothing != 0.2 {
		t.Fatalf("withDefaults = %+v", a)
	}
}
