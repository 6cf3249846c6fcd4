package retry

import (
	"math"
	"time"
)

// Backoff is the wait before a retry: retry n (n ≥ 1) waits Base × 2^(n−1), capped at
// Max, then moved by a symmetric jitter of up to ±Jitter × that value, and capped at
// Max again. It is plain data; the zero Backoff retries at once.
type Backoff struct {
	// Base is the wait before the first retry, before jitter. Negative counts as zero.
	Base time.Duration
	// Max caps every wait, before and after jitter. Zero or less means no cap.
	Max time.Duration
	// Jitter is the relative spread around the exponential value, in [0, 1] (values
	// outside are clamped): 0.2 turns 20 ms into 16–24 ms. It is sampled
	// independently for each wait.
	Jitter float64
}

// DefaultBackoff is the backoff of a retry layer without [WithBackoff]: 20 ms,
// doubling, capped at 500 ms, ±20% (16–24 ms, 32–48 ms, 64–96 ms, …).
var DefaultBackoff = Backoff{Base: 20 * time.Millisecond, Max: 500 * time.Millisecond, Jitter: 0.2}

// Delay returns the wait before retry n (n = 1 for the first retry, that is after
// attempt 1 failed). u is a uniform random number in [0, 1) that places the jitter:
// 0 gives the lowest wait, 0.5 the exponential value itself, and values near 1 the
// highest; values outside [0, 1] are clamped. Delay is a pure function, so a seeded
// source of u gives a reproducible sequence.
func (b Backoff) Delay(n int, u float64) time.Duration {
	base := max(b.Base, 0)
	if base == 0 {
		return 0
	}
	n = max(n, 1)
	d := float64(base) * math.Pow(2, float64(min(n-1, 62)))
	if b.Max > 0 && d > float64(b.Max) {
		d = float64(b.Max)
	}
	if j := min(b.Jitter, 1); j > 0 { // false for NaN
		if !(u > 0) { // NaN or ≤ 0
			u = 0
		}
		u = min(u, 1)
		d *= 1 + j*(2*u-1)
	}
	if b.Max > 0 && d > float64(b.Max) {
		d = float64(b.Max)
	}
	if d >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(d)
}
