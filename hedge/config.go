package hedge

import (
	"context"
	"math"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/attempts"
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
	// Burst is the most a [Hedger]'s token account holds, and the number of hedges
	// a new Hedger with a fixed or initial delay may send before its primaries
	// have paid for any.
	Burst = 10
)

// maxTargets bounds the number of targets a Hedger keeps state for.
const maxTargets = 1024

// Delay says how a [Hedger] finds the delay after which a call is hedged: the recent
// latency of the call's target at the percentile ([WithPercentile], [WithExtraLoad]),
// read from a sliding window of that target's latencies, within bounds. Only
// successful answers feed the window, so that fast failures do not drag the delay
// down, and so do primaries cut short by a hedge's success: at their time up to the
// cut, a lower bound of their latency, and at least a little above the delay (1/32),
// so that the window knows they took longer than it.
//
// Delay is plain data. A zero (or negative) field takes its value from
// [DefaultDelay], so Delay{Initial: 10 * time.Millisecond} changes the initial delay
// alone.
type Delay struct {
	// Window is how long a latency is remembered: between Window − Window/Buckets and
	// Window.
	Window time.Duration
	// Buckets is the number of steps the window slides by (at most 1000).
	Buckets int
	// MinSamples is how many latencies a target's window must hold before its
	// percentile is trusted as the delay.
	MinSamples int
	// Initial is the delay of a target whose window holds fewer than MinSamples
	// latencies. Zero, the default: calls to such a target are not hedged.
	Initial time.Duration
	// Min and Max bound the delay, whatever the percentile says. A zero Max, the
	// default, is no bound; a Max below Min counts as Min.
	Min, Max time.Duration
}

// DefaultDelay is the delay of a Hedger without [WithDelay]: the percentile of a 30 s
// window sliding by 10 s, once it holds 100 latencies, at least 1 ms; no initial
// delay, no maximum.
var DefaultDelay = Delay{Window: 30 * time.Second, Buckets: 3, MinSamples: 100, Min: time.Millisecond}

// orDefault returns d with its zero and negative fields taken from DefaultDelay and
// its bounds made consistent.
func (d Delay) orDefault() Delay {
	def := DefaultDelay
	if d.Window <= 0 {
		d.Window = def.Window
	}
	if d.Buckets <= 0 {
		d.Buckets = def.Buckets
	}
	d.Buckets = min(d.Buckets, 1000)
	if d.MinSamples <= 0 {
		d.MinSamples = def.MinSamples
	}
	if d.Initial <= 0 {
		d.Initial = def.Initial
	}
	if d.Min <= 0 {
		d.Min = def.Min
	}
	if d.Max <= 0 {
		d.Max = def.Max
	}
	if d.Max > 0 && d.Max < d.Min {
		d.Max = d.Min
	}
	return d
}

// Option sets a parameter of a [Hedger]. Options are applied in order; the defaults
// hold for everything not set.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	// noFastPath: every hedgeable gRPC call starts as a full call, not in a slot
	// (grpcSlot); for tests that compare the two.
	noFastPath   bool
	percentile   float64
	extraLoad    float64 // WithExtraLoad's share; 0: the percentile holds
	maxExtraLoad float64
	maxAttempts  int
	delay        Delay
	floor        time.Duration
	nonFatalHTTP []int
	nonFatalGRPC []codes.Code
	idempotent   map[string]bool
	observers    []func(context.Context, Event)
	noChainRule  bool
	keyedWrites  bool
}

func newConfig(opts []Option) *config {
	c := &config{
		percentile:   DefaultPercentile,
		maxExtraLoad: DefaultMaxExtraLoad,
		maxAttempts:  DefaultMaxAttempts,
		delay:        DefaultDelay,
		floor:        deadline.DefaultFloor,
		nonFatalHTTP: []int{503},
		nonFatalGRPC: []codes.Code{codes.Unavailable},
	}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	if c.extraLoad > 0 {
		c.percentile = 1 - min(c.extraLoad, c.maxExtraLoad)
	}
	return c
}

// hedgesAtOnce reports whether calls may be hedged from the first one, before the
// window holds any latency: there is an initial delay, or Delay's bounds fix it.
func (c *config) hedgesAtOnce() bool {
	return c.delay.Initial > 0 || c.delay.Max > 0 && c.delay.Max <= c.delay.Min
}

// markOf is the chain rule's mark on copy n ≥ 1 of a hedged call: the last copy the
// layer may send is not covered by it ([attempts.LastCopyValue]), the others are;
// every copy of a keyed write is, so that a keyed write has one copy more at most,
// whatever hedges below; none without the rule.
func (c *config) markOf(n int, keyedWrite bool) string {
	switch {
	case c.noChainRule:
		return ""
	case n >= c.maxAttempts-1 && !keyedWrite:
		return attempts.LastCopyValue
	}
	return attempts.CoveredValue
}

// disabled reports whether the options leave no room for a hedge.
func (c *config) disabled() bool { return c.maxAttempts < 2 || c.maxExtraLoad <= 0 }

// WithPercentile sets the percentile of recent latencies after which a call is
// hedged, in (0, 1]: 0.99 hedges the slowest 1% of calls. Values outside are clamped
// to [0.5, 1] (NaN: the default). Default [DefaultPercentile] (0.99). [Delay] says
// how the latencies are gathered.
func WithPercentile(p float64) Option {
	return optionFunc(func(c *config) {
		if math.IsNaN(p) {
			return
		}
		c.percentile = min(max(p, 0.5), 1)
	})
}

// WithExtraLoad hedges after the delay that spends share f of extra load, in place of
// a percentile: a call is hedged once it has taken longer than the recent (1 − f)
// quantile of its target's latencies, so that about f of the calls are hedged
// (0.05: 5 hedges per 100 primaries). It replaces [WithPercentile], whatever their
// order. The share is at most the cap ([WithMaxExtraLoad]), and the delay stays
// within [Delay]'s Min and Max. f is clamped to [0, 0.5]; 0 (or NaN) leaves the
// percentile in force. Default: unset.
//
// It names the cost rather than the percentile: the P99.9 a hedge buys is about its
// delay plus a normal latency, and on a heavy tail an earlier delay costs more
// requests and shortens the tail (BENCHMARKS.md measures it against fixed delays at
// the true quantiles).
func WithExtraLoad(f float64) Option {
	return optionFunc(func(c *config) {
		if math.IsNaN(f) {
			return
		}
		c.extraLoad = min(max(f, 0), 0.5)
	})
}

// WithMaxExtraLoad sets the largest share of the primary requests that hedges may
// add, in [0, 1]: 0.15 lets 15 hedges go out per 100 primaries. 0 disables hedging.
// Values outside are clamped (NaN: the default). Default [DefaultMaxExtraLoad] (0.15).
//
// A token account enforces it: each primary deposits that share of a token, each
// hedge withdraws a whole one, and a hedge that finds less than a token is not sent.
// The account holds at most [Burst] tokens. It starts full when calls may be hedged
// from the first one (a fixed delay, or Delay.Initial); otherwise it starts empty,
// and the primaries sent while the window warms up fill it. So over any stretch of
// calls, hedges ≤ share × primaries + Burst, and from a learned delay's start,
// hedges ≤ share × primaries. A call whose hedge finds no token tries again after
// each further delay, so that a short account's tokens go to the calls that stay
// slow more than to those that pass the delay and then answer. When every call
// turns slow at once, the delay still reflects the old latencies for a while and
// every call wants a hedge: the account runs dry and the hedges stay at the cap
// until the window has learned the new latencies. Hedging pays when the slowness
// lies with one replica, not with the request or with every replica; the cap
// bounds what it costs when it does not pay.
//
// The default leaves room for the lag of a learned delay (see the package doc):
// when a replica turns slow on a few percent of calls, every slow call is hedged
// until the window has learned the stall. A cap of twice the percentile's share
// (0.02 for the P99) keeps a hedger within that share from its start instead,
// and the window learns the stall sooner, after which it is no longer hedged.
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
// 1 disables hedging. Default [DefaultMaxAttempts] (2: one primary, one hedge).
func WithMaxAttempts(n int) Option {
	return optionFunc(func(c *config) { c.maxAttempts = min(max(n, 1), MaxAttempts) })
}

// WithDelay sets how the delay before a hedge is found (see [Delay]; its zero fields
// take their defaults), replacing what an earlier WithDelay set. Default
// [DefaultDelay].
func WithDelay(d Delay) Option {
	return optionFunc(func(c *config) { c.delay = d.orDefault() })
}

// WithFloor sets the least time left before the call's deadline for which a hedge is
// still sent: a copy with no time to run only adds load. Default
// [deadline.DefaultFloor] (20 ms). A call without deadline is never refused a hedge
// for lack of time.
func WithFloor(d time.Duration) Option {
	return optionFunc(func(c *config) { c.floor = max(d, 0) })
}

// WithNonFatalHTTP sets the HTTP status codes that, answered by an attempt, fire the
// next hedge at once instead of waiting for the delay, as in gRPC's hedging design
// (A6); when no copy is left, the last such answer is returned. A connection refused
// (a dial error) is always non-fatal. Default: 503. None: only dial errors are.
func WithNonFatalHTTP(statuses ...int) Option {
	return optionFunc(func(c *config) { c.nonFatalHTTP = append([]int(nil), statuses...) })
}

// WithNonFatalGRPC sets the gRPC codes that, returned by an attempt, fire the next
// hedge at once instead of waiting for the delay (gRPC A6's non-fatal status codes);
// when no copy is left, the last such failure is returned. Default: UNAVAILABLE.
// None: no code is.
func WithNonFatalGRPC(cs ...codes.Code) Option {
	return optionFunc(func(c *config) { c.nonFatalGRPC = append([]codes.Code(nil), cs...) })
}

// WithIdempotentMethods declares gRPC methods idempotent, by full name
// ("/package.Service/Method"), whatever their descriptor says. Repeated uses add up.
func WithIdempotentMethods(methods ...string) Option {
	return optionFunc(func(c *config) { c.idempotent = addMethods(c.idempotent, methods) })
}

// addMethods adds methods to set, made when nil and there are some, and returns it.
func addMethods(set map[string]bool, methods []string) map[string]bool {
	if len(methods) == 0 {
		return set
	}
	if set == nil {
		set = make(map[string]bool, len(methods))
	}
	for _, m := range methods {
		set[m] = true
	}
	return set
}

// WithObserver adds f to the functions called once per call, when it ends, with
// what the hedging layer did (see [Event]). Each use adds one; they are called in
// the order given, on the caller's goroutine, and must not block. A panic in f is
// the caller's: it goes through unchanged (the answer it would have received is
// closed first). Tracing does not depend on observers: the layer records the call on
// its span (the attributes package otelattr names) either way.
func WithObserver(f func(ctx context.Context, e Event)) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.observers = append(c.observers, f)
		}
	})
}

// WithoutChainRule makes the Hedger hedge the calls of a request that a layer above
// may send again, and leaves the mark that says so off its own calls: each layer of
// a chain then hedges for itself, as before the chain rule, and the extra load
// multiplies down the chain (about 1.15 per hop that hedges, in BENCHMARKS.md). It
// is meant for measuring that. Default: the chain rule holds (see [Hedger]).
func WithoutChainRule() Option {
	return optionFunc(func(c *config) { c.noChainRule = true })
}

// WithKeyedWrites makes the Hedger hedge keyed writes: HTTP requests whose method
// is not idempotent, and calls of gRPC methods not declared idempotent, that carry
// an idempotency key (the caller's, or one package retry derived). Default: they are
// sent once ([Stats].KeyedWrites, span attribute deadlinekit.hedge.skip =
// "keyed_write"): against a server that deduplicates, a copy that arrives while the
// first runs waits for the first's answer, and pays only when the first was lost.
// Opted in, every copy of a keyed write carries deadlinekit-hedged-above: 1, the last
// one included, so that no hop beneath hedges it again. The package documentation
// says more ("Keyed writes").
func WithKeyedWrites() Option {
	return optionFunc(func(c *config) { c.keyedWrites = true })
}
