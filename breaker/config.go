package breaker

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// Defaults of the options, and the bounds they are held to.
const (
	// DefaultFailureRatio is the share of failures in the window above which the
	// breaker opens (Hystrix and resilience4j use 50%; the reference material 60%).
	DefaultFailureRatio = 0.6
	// DefaultMinCalls is how many counted calls (failures and successes) the window
	// must hold before a ratio may open the breaker: Hystrix's 20, so that three
	// failures of the first five calls do not open it.
	DefaultMinCalls = 20
	// DefaultConsecutiveFailures is the number of failures in a row, with no success
	// between them (neutral outcomes do not break a run), that opens the breaker
	// whatever the window holds. A dead target opens it in 20 calls, not after the
	// ratio has outgrown the window's successes (about 6 s of a 10 s window at 60%).
	// Finagle and Envoy use 5; 20 keeps a target that fails a third of its calls at
	// random from ever opening (0.3²⁰ ≈ 3.5 × 10⁻¹¹ per call), though one that fails
	// half of them opens about once in a million calls.
	DefaultConsecutiveFailures = 20
	// DefaultWindow and DefaultWindowBuckets describe the sliding window: ten buckets
	// of one second, so a call counts for between 9 and 10 s.
	DefaultWindow        = 10 * time.Second
	DefaultWindowBuckets = 10
	// MaxWindowBuckets bounds [WithWindow]'s buckets (each takes 12 bytes per target).
	MaxWindowBuckets = 1000
	// DefaultProbes is the number of calls let through in half-open: all of them must
	// succeed to close the breaker, one failure opens it again.
	DefaultProbes = 3
	// MaxLostProbes is the number of lost probes that re-open a half-open breaker. A
	// probe is lost when its answer never came: it timed out (a failure by [Classify]
	// and by every timeout rule), or it was still out a whole sleep after it was
	// sent and was given up on. A lost answer may be the network's or the caller's
	// loss as well as the target's, so it does not lengthen the sleep: each lost
	// probe frees its slot for another, and the MaxLostProbes-th of one half-open
	// spell re-opens the breaker for the same sleep as the last one, where a probe
	// that fails outright (refused, UNAVAILABLE, 503) re-opens it for the next,
	// longer one. A target that hangs is thus probed once per sleep, without growth.
	MaxLostProbes = 3
	// MaxTargets bounds the number of targets a [Breaker] keeps a circuit for. When
	// it has as many, a new target takes the place of the closed circuits that
	// admitted no call for twice the window (the longer of [WithWindow]'s and the
	// throttle's: nothing is left in them), so that a long-lived client whose
	// targets change (hosts, a target's endpoints as its replicas are replaced)
	// keeps breaking the new ones. Calls to a target beyond MaxTargets circuits in
	// use are sent unbroken and counted in [Stats].Untracked: a shared circuit for
	// the overflow would let a dead target open a healthy one's breaker.
	MaxTargets = 1024
)

// DefaultSleep is the sleep of a breaker without [WithOpenFor] or [WithSleep]: 5 s
// the first time it opens, doubling at each failed probe up to 300 s (Finagle's
// failure accrual: 5 s → 300 s), each sleep moved by up to ±20% so that the clients
// of one downstream do not all probe it at the same moment.
var DefaultSleep = Sleep{First: 5 * time.Second, Max: 300 * time.Second, Factor: 2, Jitter: 0.2}

// Option sets a parameter of a [Breaker]. Options are applied in order; the defaults
// hold for everything not set.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	failureRatio float64
	minCalls     int
	consecutive  int // zero: no consecutive-failures trip
	window       time.Duration
	buckets      int
	sleep        Sleep
	probes       int
	slow         time.Duration // zero: no slow-call tripping
	slowRatio    float64
	key          KeyFunc
	classify     Classifier
	random       func() float64
	observers    []func(context.Context, Event)
	throttle     *Throttle // nil: no adaptive throttling (WithoutAdaptiveThrottling)
}

func newConfig(opts []Option) *config {
	throttle := DefaultThrottle.normalized()
	c := &config{
		throttle:     &throttle,
		failureRatio: DefaultFailureRatio,
		minCalls:     DefaultMinCalls,
		consecutive:  DefaultConsecutiveFailures,
		window:       DefaultWindow,
		buckets:      DefaultWindowBuckets,
		sleep:        DefaultSleep,
		probes:       DefaultProbes,
		classify:     Classify,
		random:       rand.Float64,
	}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	return c
}

// ratio clamps a ratio option to [0, 1]; ok is false for NaN (the option is ignored).
func ratio(r float64) (float64, bool) {
	if math.IsNaN(r) {
		return 0, false
	}
	return min(max(r, 0), 1), true
}

// WithFailureRatio sets the share of failures among the counted calls of the window
// above which the breaker opens, in [0, 1] (values outside are clamped; NaN is
// ignored). 1 never opens on failures. Default [DefaultFailureRatio] (0.6).
func WithFailureRatio(r float64) Option {
	return optionFunc(func(c *config) {
		if r, ok := ratio(r); ok {
			c.failureRatio = r
		}
	})
}

// WithMinCalls sets how many counted calls (successes and failures; neutral outcomes
// do not count) the window must hold before the breaker may open; at least 1.
// Default [DefaultMinCalls] (20).
func WithMinCalls(n int) Option {
	return optionFunc(func(c *config) { c.minCalls = max(n, 1) })
}

// WithConsecutiveFailures sets the number of failures in a row that opens the
// breaker, whatever the window's ratio; successes end a run, neutral outcomes do not.
// Zero or less turns this trip off, leaving the ratios. Default
// [DefaultConsecutiveFailures] (20).
func WithConsecutiveFailures(n int) Option {
	return optionFunc(func(c *config) { c.consecutive = max(n, 0) })
}

// WithOpenFor sets the first sleep: how long the breaker stays open, refusing every
// call, before it lets probes through. Later sleeps, after failed probes, grow from
// it (see [Sleep]); a value of zero or less keeps the default. Default 5 s.
func WithOpenFor(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.sleep.First = d
			c.sleep.Max = max(c.sleep.Max, d)
		}
	})
}

// WithSleep sets the whole sleep curve ([Sleep]); [WithOpenFor] after it changes
// its First. Default [DefaultSleep].
func WithSleep(s Sleep) Option {
	return optionFunc(func(c *config) { c.sleep = s })
}

// WithProbes sets how many calls are let through in half-open, at least 1: they all
// must succeed to close the breaker. Default [DefaultProbes] (3).
func WithProbes(n int) Option {
	return optionFunc(func(c *config) { c.probes = max(n, 1) })
}

// WithSlowCall makes slow calls open the breaker: a counted call that took longer
// than threshold is slow, and the breaker opens when, with at least the minimum of
// calls in the window, the share of slow calls exceeds ratio (in [0, 1], clamped).
// A threshold of zero or less, or a NaN ratio, turns it off. Off by default. For a
// low-traffic service with a long timeout, this is what opens the breaker before a
// window's worth of timeouts: a 3 s timeout over a 10 s window leaves few samples.
// An HTTP call's time is its time to the response's header.
func WithSlowCall(threshold time.Duration, ratio float64) Option {
	return optionFunc(func(c *config) {
		if threshold <= 0 || math.IsNaN(ratio) {
			c.slow, c.slowRatio = 0, 0
			return
		}
		c.slow, c.slowRatio = threshold, min(max(ratio, 0), 1)
	})
}

// WithWindow sets the sliding window: calls count for length, in buckets of
// length/buckets (the window moves on by one bucket at a time, so a call counts for
// between length − length/buckets and length). buckets is held to [1,
// [MaxWindowBuckets]]; a length of zero or less keeps the default. Default 10 s in 10
// buckets. The target's typical latency (see [Classify]) is kept over the same window.
func WithWindow(length time.Duration, buckets int) Option {
	return optionFunc(func(c *config) {
		if length > 0 {
			c.window = length
		}
		c.buckets = min(max(buckets, 1), MaxWindowBuckets)
	})
}

// WithKey sets the function that names the circuit a call goes through, for
// per-method or per-peer breaking; a nil f restores the default (one circuit per
// target). Its result should come from a small set: at most [MaxTargets] circuits are
// kept. Building a key per call costs what f allocates.
func WithKey(f KeyFunc) Option {
	return optionFunc(func(c *config) { c.key = f })
}

// WithClassifier sets the function that decides whether a call was a success, a
// failure or neutral; a nil f restores [Classify]. To change one case, call Classify
// for the others.
func WithClassifier(f Classifier) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			f = Classify
		}
		c.classify = f
	})
}

// withRandom replaces the source of the sleep's jitter (tests).
func withRandom(f func() float64) Option {
	return optionFunc(func(c *config) { c.random = f })
}

// Event is a circuit's change of state, for an observer ([WithObserver]).
type Event struct {
	Target   string // the circuit's name
	From, To State
}

// WithObserver adds f to the functions called when a circuit changes state, with the
// change. Each use adds one; they are called in the order given, on the goroutine of
// the call that made the change (after the circuit's lock is released), and must not
// block. A panic in f is the caller's: it goes through, except where the change was
// made on a goroutine of the breaker's (a gRPC stream whose caller's context ended),
// where it is dropped rather than kill the process. Tracing does not depend on
// observers: the layer records the change on the call's span either way.
func WithObserver(f func(ctx context.Context, e Event)) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.observers = append(c.observers, f)
		}
	})
}
