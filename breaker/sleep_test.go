package breaker

import (
	"math"
	"testing"
	"time"
)

func TestSleepDelay(t *testing.T) {
	d := DefaultSleep
	for _, c := range []struct {
		s    Sleep
		n    int
		u    float64
		want time.Duration
	}{
		{d, 1, 0.5, 5 * time.Second},
		{d, 2, 0.5, 10 * time.Second},
		{d, 6, 0.5, 160 * time.Second},
		{d, 7, 0.5, 300 * time.Second}, // 320 s, capped
		{d, 1, 0, 4 * time.Second},     // −20%
		{d, 1, 1, 6 * time.Second},     // +20%
		{d, 7, 1, 300 * time.Second},   // jitter never passes the cap
		{d, 7, 0, 240 * time.Second},
		{d, 0, 0.5, 5 * time.Second},             // n below 1 counts as 1
		{d, math.MaxInt, 0.5, 300 * time.Second}, // huge n
		{d, 1, math.NaN(), 4 * time.Second},      // NaN u: the lowest
		{d, 1, 7, 6 * time.Second},               // u clamped
		{Sleep{}, 3, 0.5, 5 * time.Second},       // zero: the default first, factor 1, no cap below it
		{Sleep{First: time.Second, Max: time.Millisecond, Factor: 2}, 3, 0.5, time.Second}, // Max below First
		{Sleep{First: time.Second, Max: time.Hour, Factor: math.NaN()}, 5, 0.5, time.Second},
		{Sleep{First: time.Second, Max: time.Hour, Factor: 0.5}, 5, 0.5, time.Second},
		{Sleep{First: time.Second, Max: time.Hour, Factor: 2, Jitter: 5}, 1, 0, 0}, // jitter clamped to 1
		{Sleep{First: time.Second, Max: math.MaxInt64, Factor: math.Inf(1)}, 2, 0.5, math.MaxInt64},
	} {
		if got := c.s.Delay(c.n, c.u); got != c.want {
			t.Errorf("%+v.Delay(%d, %v) = %v, want %v", c.s, c.n, c.u, got, c.want)
		}
	}
}

func TestWithOpenForMovesTheFirstSleep(t *testing.T) {
	c := newConfig([]Option{WithOpenFor(time.Hour)})
	if c.sleep.First != time.Hour || c.sleep.Max != time.Hour {
		t.Fatalf("sleep = %+v", c.sleep)
	}
	c = newConfig([]Option{WithOpenFor(-1)})
	if c.sleep != DefaultSleep {
		t.Fatalf("a negative WithOpenFor changed the sleep: %+v", c.sleep)
	}
}

func TestOptionsClamp(t *testing.T) {
	c := newConfig([]Option{WithFailureRatio(math.NaN()), WithMinCalls(-3), WithProbes(0), WithWindow(0, 1<<40), WithSlowCall(time.Second, 7), nil})
	if c.failureRatio != DefaultFailureRatio || c.minCalls != 1 || c.probes != 1 || c.window != DefaultWindow || c.buckets != MaxWindowBuckets || c.slowRatio != 1 {
		t.Fatalf("config = %+v", c)
	}
	c = newConfig([]Option{WithFailureRatio(-1), WithSlowCall(time.Second, 0.5), WithSlowCall(0, 0.5), WithClassifier(nil)})
	if c.failureRatio != 0 || c.slow != 0 || c.classify == nil {
		t.Fatalf("config = %+v", c)
	}
}
