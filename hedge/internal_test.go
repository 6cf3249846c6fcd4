package hedge

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/deadlinekit/deadlinekit/deadline"
)

// TestTokensConcurrent: however primaries and hedges interleave, hedges never exceed
// the reserve (none for an account that starts empty) plus the share paid by the
// primaries.
func TestTokensConcurrent(t *testing.T) {
	for _, tc := range []struct {
		ratio float64
		full  bool
	}{{0.15, true}, {0.05, true}, {1, true}, {0, true}, {0.02, false}, {0.15, false}} {
		ratio := tc.ratio
		tk := newTokens(ratio, tc.full)
		var pays, takes atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 5000 {
					tk.pay()
					pays.Add(1)
					for tk.take() {
						takes.Add(1)
					}
				}
			})
		}
		wg.Wait()
		limit := int64(ratio * float64(pays.Load()))
		if tc.full {
			limit += Burst
		}
		if takes.Load() > limit {
			t.Errorf("ratio %v: %d hedges for %d primaries, limit %d", ratio, takes.Load(), pays.Load(), limit)
		}
		if ratio > 0 && takes.Load() < limit*9/10 {
			t.Errorf("ratio %v: only %d hedges for %d primaries, limit %d", ratio, takes.Load(), pays.Load(), limit)
		}
		if b := tk.value(); b < 0 || b > Burst {
			t.Errorf("ratio %v: balance %v out of [0, %d]", ratio, b, Burst)
		}
	}
}

// TestOptionsClamped: hostile option values are clamped, never a panic.
func TestOptionsClamped(t *testing.T) {
	c := newConfig([]Option{
		nil,
		WithPercentile(math.NaN()), WithPercentile(7),
		WithMaxExtraLoad(-1), WithMaxExtraLoad(math.NaN()),
		WithMaxAttempts(100),
		WithDelay(Delay{MinSamples: -5, Initial: -time.Second, Min: 10 * time.Millisecond, Max: time.Millisecond, Window: -1, Buckets: -1}),
		WithFloor(-time.Second),
		WithNonFatalGRPC(),
		WithIdempotentMethods("/a/b"), WithIdempotentMethods("/c/d"),
	})
	want := config{percentile: 1, maxExtraLoad: 0, maxAttempts: MaxAttempts, delay: Delay{MinSamples: DefaultDelay.MinSamples,
		Min: 10 * time.Millisecond, Max: 10 * time.Millisecond, Window: DefaultDelay.Window, Buckets: DefaultDelay.Buckets}}
	if c.percentile != want.percentile || c.maxExtraLoad != want.maxExtraLoad || c.maxAttempts != want.maxAttempts ||
		c.delay != want.delay || c.floor != 0 || len(c.nonFatalGRPC) != 0 || len(c.idempotent) != 2 {
		t.Errorf("config = %+v", *c)
	}
	if b := newConfig([]Option{WithDelay(Delay{Buckets: 1 << 20})}).delay.Buckets; b != 1000 {
		t.Errorf("buckets = %d; want 1000", b)
	}
	d := newConfig(nil)
	if d.percentile != DefaultPercentile || d.maxExtraLoad != DefaultMaxExtraLoad || d.maxAttempts != 2 ||
		d.delay != DefaultDelay || d.floor != deadline.DefaultFloor || len(d.nonFatalHTTP) != 1 || d.nonFatalGRPC[0] != codes.Unavailable {
		t.Errorf("defaults = %+v", *d)
	}
}

// The account starts full only when calls may be hedged from the first one: a
// fixed delay, or an initial one.
func TestAccountStartsFullWhenHedgingAtOnce(t *testing.T) {
	fixed := Delay{Initial: 10 * time.Millisecond, Min: 10 * time.Millisecond, Max: 10 * time.Millisecond}
	for _, tc := range []struct {
		name string
		opts []Option
		full bool
	}{
		{"default", nil, false},
		{"fixed delay", []Option{WithDelay(fixed)}, true},
		{"initial delay", []Option{WithDelay(Delay{Initial: 10 * time.Millisecond})}, true},
		{"delay bounded, not fixed", []Option{WithDelay(Delay{Min: time.Millisecond, Max: time.Second})}, false},
	} {
		if c := newConfig(tc.opts); c.hedgesAtOnce() != tc.full {
			t.Errorf("%s: account starts full %v; want %v", tc.name, c.hedgesAtOnce(), tc.full)
		}
	}
}

// WithExtraLoad is clamped to [0, 0.5] and to the cap, replaces the percentile
// whatever the order, and leaves it alone when 0 or NaN.
func TestExtraLoadOption(t *testing.T) {
	for _, tc := range []struct {
		opts []Option
		want float64
	}{
		{[]Option{WithExtraLoad(0.05)}, 0.95},
		{[]Option{WithExtraLoad(0.05), WithPercentile(0.9)}, 0.95},
		{[]Option{WithExtraLoad(0.9)}, 1 - DefaultMaxExtraLoad},
		{[]Option{WithExtraLoad(0.9), WithMaxExtraLoad(1)}, 0.5},
		{[]Option{WithExtraLoad(0.1), WithMaxExtraLoad(0.02)}, 0.98},
		{[]Option{WithPercentile(0.9), WithExtraLoad(0)}, 0.9},
		{[]Option{WithPercentile(0.9), WithExtraLoad(math.NaN())}, 0.9},
		{[]Option{WithExtraLoad(-1)}, DefaultPercentile},
	} {
		if got := newConfig(tc.opts).percentile; math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%d options: percentile %v; want %v", len(tc.opts), got, tc.want)
		}
	}
}
