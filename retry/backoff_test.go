package retry_test

import (
	"math"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit/retry"
)

func TestBackoffDelay(t *testing.T) {
	ms := time.Millisecond
	d := retry.DefaultBackoff
	cases := []struct {
		b    retry.Backoff
		n    int
		u    float64
		want time.Duration
	}{
		{d, 1, 0.5, 20 * ms},
		{d, 1, 0, 16 * ms},
		{d, 1, 1, 24 * ms},
		{d, 2, 0.5, 40 * ms},
		{d, 3, 0, 64 * ms},
		{d, 5, 0.5, 320 * ms},
		{d, 6, 0.5, 500 * ms}, // 640 capped
		{d, 6, 0, 400 * ms},   // capped, then jittered down
		{d, 6, 1, 500 * ms},   // capped again after jitter
		{d, 1000, 1, 500 * ms},
		{d, 0, 0.5, 20 * ms}, // n < 1 counts as 1
		{d, -5, 0.5, 20 * ms},
		{d, 1, -3, 16 * ms},          // u clamped
		{d, 1, 7, 24 * ms},           // u clamped
		{d, 1, math.NaN(), 16 * ms},  // NaN u: lowest
		{retry.Backoff{}, 3, 0.5, 0}, // zero value: at once
		{retry.Backoff{Base: -ms, Max: ms}, 1, 0.5, 0},
		{retry.Backoff{Base: 10 * ms}, 4, 0.5, 80 * ms},    // no cap, no jitter
		{retry.Backoff{Base: 10 * ms, Jitter: 5}, 1, 0, 0}, // jitter clamped to 1
		{retry.Backoff{Base: 10 * ms, Jitter: math.NaN()}, 1, 0, 10 * ms},        // NaN jitter: none
		{retry.Backoff{Base: time.Hour}, 200, 0.5, time.Duration(math.MaxInt64)}, // saturates
		{retry.Backoff{Base: 200 * ms, Max: 2 * time.Second, Jitter: 0.5}, 2, 0.955, 582 * ms},
	}
	for _, c := range cases {
		if got := c.b.Delay(c.n, c.u); got-c.want < -time.Microsecond || got-c.want > time.Microsecond {
			t.Errorf("%+v.Delay(%d, %v) = %v; want %v", c.b, c.n, c.u, got, c.want)
		}
	}
}

func FuzzBackoffDelay(f *testing.F) {
	f.Add(int64(20e6), int64(500e6), 0.2, 3, 0.5)
	f.Add(int64(-1), int64(0), math.Inf(1), -1, math.NaN())
	f.Fuzz(func(t *testing.T, base, maxD int64, jitter float64, n int, u float64) {
		b := retry.Backoff{Base: time.Duration(base), Max: time.Duration(maxD), Jitter: jitter}
		got := b.Delay(n, u)
		if got < 0 {
			t.Fatalf("%+v.Delay(%d, %v) = %v < 0", b, n, u, got)
		}
		if b.Max > 0 && got > b.Max {
			t.Fatalf("%+v.Delay(%d, %v) = %v > Max", b, n, u, got)
		}
	})
}
