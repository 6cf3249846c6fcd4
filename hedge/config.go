package hedge

import (
	"context"
	"math"
	"time"

	"google.golang.org/grpc/codes"
)

// Defaults of the options, and the bounds the options are clamped to.
const (
	// DefaultPercentile is the percentile of recent latencies after which a call is
	// hedged.
	DefaultPercentile = 0.99
	// DefaultMaxExtraLoad is the largest share of the primaries that hedges may add.
	DefaultMaxExtraLoad = 0.15
	// DefaultMaxAttempts is the number of copies of a call, the primary included.
	DefaultMaxAttempts = 2
	// MaxAttempts is the most [WithMaxAttempts] accepts.
	MaxAttempts = 5
	// DefaultMinSamples is how many latencies a target's window must hold before its
	// percentile is trusted as a delay.
	DefaultMinSamples = 100
	// DefaultWindow and DefaultWindowBuckets describe the sliding window of
	// latencies: a latency stays in it between 20 and 30 s.
	DefaultWindow        = 30 * time.Second
	DefaultWindowBuckets = 3
	// DefaultMinDelay is the shortest delay a hedge waits for.
	DefaultMinDelay = time.Millisecond
	// DefaultFloor is the least time left before the deadline for which a hedge is
	// still sent.
	DefaultFloor = 20 * time.Millisecond
	// Burst is the number of hedges a new [Hedger] may send before its primaries
	// have paid for any, and the most its token account holds.
	Burst = 10
	// MaxTargets bounds the number of targets (hosts, gRPC methods, hedged or not) a
	// Hedger keeps state for; calls to targets beyond it are hedged only with
	// [WithInitialDelay], and a gRPC method's descriptor is then looked up per call.
	MaxTargets = 1024
)

// Option sets a parameter of a [Hedger]. Options are applied in order; the defaults
// hold for everything not set.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	percentile   float64
	maxExtraLoad float64
	maxAttempts  int
	minSamples   int
	initialDelay time.Duration
	minDelay     time.Duration
	maxDelay     time.Duration
	window       time.Duration
	buckets      int
	floor        time.Duration
	nonFatalHTTP []int
	nonFatalGRPC []codes.Code
	idempotent   map[string]bool
	observers    []func(context.Context, Event)
}

func newConfig(opts []Option) *config {
	c := &config{
		percentile:   DefaultPercentile,
		maxExtraLoad: DefaultMaxExtraLoad,
		maxAttempts:  DefaultMaxAttempts,
		minSamples:   DefaultMinSamples,
		minDelay:     DefaultMinDelay,
		window:       DefaultWindow,
		buckets:      DefaultWindowBuckets,
		floor:        DefaultFloor,
		nonFatalHTTP: []int{503},
		nonFatalGRPC: []codes.Code{codes.Unavailable},
	}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	if c.maxDelay > 0 && c.maxDelay < c.minDelay {
		c.maxDelay = c.minDelay
	}
	return c
}

// disabled reports whether the options leave no room for a hedge.
func (c *config) disabled() bool { return c.maxAttempts < 2 || c.maxExtraLoad <= 0 }

// WithPercentile sets the percentile of recent latencies after which a call is
// hedged, in (0, 1]: 0.99 hedges the slowest 1% of calls. Values outside are clamped
// to [0.5, 1] (NaN: the default). Default [DefaultPercentile] (0.99).
func WithPercentile(p float64) Option {
	return optionFunc(func(c *config) {
		if math.IsNaN(p) {
			return
		}
		c.percentile = min(max(p, 0.5), 1)
	})
}

// WithMaxExtraLoad sets the largest share of the primary requests that hedges may
// add, in [0, 1]: 0.15 lets 15 hedges go out per 100 primaries (plus the first
// [Burst]). 0 disables hedging. Values outside are clamped (NaN: the default).
// Default [DefaultMaxExtraLoad] (0.15).
func WithMaxExtraLoad(f float64) Option {
	return optionFunc(func(c *config) {
		if math.IsNaN(f) {
			return
		}
		c.maxExtraLoad = min(max(f, 0), 1)
	})
}

// WithMaxAttempts sets the number of copies of a call, the primary included, clamped
// to 1..[MaxAttempts]; each further hedge goes out one delay after the previous one.
// 1 disables hedging. Default [DefaultMaxAttempts] (2).
func WithMaxAttempts(n int) Option {
	return optionFunc(func(c *config) { c.maxAttempts = min(max(n, 1), MaxAttempts) })
}

// WithMinSamples sets how many latencies a target's window must hold before its
// percentile is used as the delay (at least 1). Below it, calls are not hedged, or
// hedged after [WithInitialDelay] when set. Default [DefaultMinSamples] (100).
func WithMinSamples(n int) Option {
	return optionFunc(func(c *config) { c.minSamples = max(n, 1) })
}

// WithInitialDelay sets the delay used for a target whose window holds fewer than
// the minimum of samples ([WithMinSamples]). Default 0: such calls are not hedged.
func WithInitialDelay(d time.Duration) Option {
	return optionFunc(func(c *config) { c.initialDelay = max(d, 0) })
}

// WithMinDelay sets the shortest delay before a hedge, whatever the percentile says.
// Default [DefaultMinDelay] (1 ms).
func WithMinDelay(d time.Duration) Option {
	return optionFunc(func(c *config) { c.minDelay = max(d, 0) })
}

// WithMaxDelay sets the longest delay before a hedge, whatever the percentile says.
// Zero (the default) means no maximum.
func WithMaxDelay(d time.Duration) Option {
	return optionFunc(func(c *config) { c.maxDelay = max(d, 0) })
}

// WithWindow sets the sliding window of latencies: a latency stays in it between
// length − length/buckets and length. Non-positive values keep the default,
// [DefaultWindow] (30 s) in [DefaultWindowBuckets] (3).
func WithWindow(length time.Duration, buckets int) Option {
	return optionFunc(func(c *config) {
		if length > 0 {
			c.window = length
		}
		if buckets > 0 {
			c.buckets = min(buckets, 1000)
		}
	})
}

// WithFloor sets the least time left before the call's deadline for which a hedge is
// still sent. Default [DefaultFloor] (20 ms). A call without deadline is never
// refused a hedge for lack of time.
func WithFloor(d time.Duration) Option {
	return optionFunc(func(c *config) { c.floor = max(d, 0) })
}

// WithNonFatalHTTPStatus sets the HTTP status codes that, answered by an attempt,
// fire the next hedge at once instead of ending the call; when no attempt is left,
// the last such answer is returned. Default: 503. A connection refused (a dial
// error) is always non-fatal. No codes: only dial errors are.
func WithNonFatalHTTPStatus(codes ...int) Option {
	return optionFunc(func(c *config) { c.nonFatalHTTP = append([]int(nil), codes...) })
}

// WithNonFatalCodes sets the gRPC codes that, returned by an attempt, fire the next
// hedge at once instead of ending the call (gRPC A6's non-fatal status codes).
// Default: UNAVAILABLE.
func WithNonFatalCodes(cs ...codes.Code) Option {
	return optionFunc(func(c *config) { c.nonFatalGRPC = append(c.nonFatalGRPC[:0:0], cs...) })
}

// WithIdempotentMethods declares gRPC methods idempotent, by full name
// ("/package.Service/Method"), whatever their descriptor says. Repeated uses add up.
func WithIdempotentMethods(methods ...string) Option {
	return optionFunc(func(c *config) {
		if c.idempotent == nil {
			c.idempotent = make(map[string]bool, len(methods))
		}
		for _, m := range methods {
			c.idempotent[m] = true
		}
	})
}

// WithObserver adds f to the functions called once per call, when it ends, with
// what the hedging layer did (see [Event]). Each use adds one; they are called in
// the order given, on the caller's goroutine, and must not block. A panic in f is
// the caller's: it goes through unchanged (the answer it would have received is
// closed first). Tracing does not depend on observers: package otelattr records the
// call on its span either way. Without any (the default), observation costs nothing.
func WithObserver(f func(ctx context.Context, e Event)) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.observers = append(c.observers, f)
		}
	})
}
