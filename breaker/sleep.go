package breaker

import (
	"math"
	"time"
)

// Sleep is how long an open breaker refuses calls before it lets probes through:
// the n-th consecutive opening (n = 1 when it opens from closed, 2 after the first
// failed probe, …) sleeps First × Factor^(n−1), capped at Max, moved by a symmetric
// jitter of up to ±Jitter × that value, and capped at Max again. It is plain data.
type Sleep struct {
	// First is the first sleep, before jitter. Zero or less: [DefaultSleep]'s.
	First time.Duration
	// Max caps every sleep; below First it counts as First.
	Max time.Duration
	// Factor is the growth at each failed probe; below 1 (or NaN) it counts as 1.
	Factor float64
	// Jitter is the relative spread, in [0, 1] (clamped): 0.2 turns 5 s into 4–6 s.
	Jitter float64
}

// Delay returns the n-th sleep. u is a uniform random number in [0, 1) that places
// the jitter: 0 gives the shortest sleep, 0.5 the curve's value itself; values outside
// [0, 1] are clamped. It is a pure function: a seeded u gives a reproducible sequence.
func (s Sleep) Delay(n int, u float64) time.Duration {
	first := s.First
	if first <= 0 {
		first = DefaultSleep.First
	}
	top := float64(max(s.Max, first))
	f := s.Factor
	if !(f >= 1) {
		f = 1
	}
	d := float64(first) * math.Pow(f, float64(min(max(n, 1)-1, 1000)))
	d = min(d, top) // min of +Inf and top is top
	if j := min(s.Jitter, 1); j > 0 {
		if !(u > 0) {
			u = 0
		}
		d *= 1 + j*(2*min(u, 1)-1)
	}
	d = min(d, top)
	if d >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(d)
}
