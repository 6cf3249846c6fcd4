package deadlinekit

import (
	"net/http"
	"time"

	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// DefaultReserve is the time a client keeps for itself from the budget it passes on:
// the downstream is told (time left − reserve), so that the answer arrives while the
// caller can still use it. It is at most [DefaultReserveFraction] of the time left,
// so that it does not eat a short budget: a call with 20 ms left keeps 2 ms.
//
// With the defaults, no floor compounds down a chain: each server's guard learns its
// floor from its own handler (package shortcircuit: the 5th percentile of its
// recent durations, between 1 ms and 1 s), and a client, which cannot know the
// downstream's, refuses to send only below [deadline.MinFloor] (1 ms) and hedges or
// retries only with that plus the reserve left. A chain of four 3 ms handlers
// answers a 25 ms budget (BENCHMARKS.md); a hop whose handler takes 50 ms still
// refuses a request that arrives with 30 ms.
const DefaultReserve = 5 * time.Millisecond

// DefaultReserveFraction bounds the reserve at this share of the time left.
const DefaultReserveFraction = 0.1

// Layer names one layer of the stack, for [Without].
type Layer uint8

// The layers. On the client side a call meets them in the order retry, breaker,
// hedge, propagate; on the server side propagate, retry, shortcircuit.
const (
	Propagate Layer = iota + 1
	ShortCircuit
	Retry
	Hedge
	Breaker
	// Keys is the server side's passing of idempotency keys without a store: a
	// handler serving a request with an Idempotency-Key sends keys derived from it
	// on its own writes (dedup.PassKeys). On by default where [WithDedup] gives no
	// store (with one, dedup derives them itself, unless dedup.WithoutKeyDerivation).
	Keys
)

func (l Layer) String() string {
	switch l {
	case Propagate:
		return "propagate"
	case ShortCircuit:
		return "shortcircuit"
	case Retry:
		return "retry"
	case Hedge:
		return "hedge"
	case Breaker:
		return "breaker"
	case Keys:
		return "keys"
	}
	return "Layer(?)"
}

// Option configures the stack. Options are applied in order; the defaults hold for
// everything not set.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	floor, reserve time.Duration
	floorSet       bool // WithFloor was given: a static floor for every layer
	reserveSet     bool // WithReserve was given: that reserve, unbounded
	without        [Keys + 1]bool
	idempotent     []string
	hedger         *hedge.Hedger
	circuits       *breaker.Breaker
	propagate      []propagate.Option
	shortcircuit   []shortcircuit.Option
	retry          []retry.Option
	hedge          []hedge.Option
	breaker        []breaker.Option
	dedup          dedupConfig
	edge           bool                                  // WithEdge: the server answers end users
	level          func(*http.Request) criticality.Level // WithCriticality
}

func newConfig(opts []Option) *config {
	c := &config{floor: deadline.MinFloor, reserve: DefaultReserve}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	return c
}

// WithFloor sets a static floor, the least budget a hop is worth starting with, for
// every layer at once: the server's guard refuses a request with less left
// (shortcircuit, which then no longer learns its floor), the client does not send
// one with less after its reserve (propagate), and hedges and retries go out only
// with at least floor + reserve left (hedge, retry), since anything less would be
// refused downstream. Zero or less turns the floors off.
//
// Default: no static floor. The guard learns each route's floor from its handler
// (see [shortcircuit.WithFloor]), and the client side uses [deadline.MinFloor]
// (1 ms): a static floor at every hop is paid at every hop, so that a chain of fast
// handlers needs hops × floor of budget.
func WithFloor(d time.Duration) Option {
	return optionFunc(func(c *config) { c.floor, c.floorSet = max(d, 0), true })
}

// WithReserve sets the time a client keeps for itself from the budget it passes on
// (propagate's reserve); hedges and retries need floor + reserve. Zero or less:
// none. Default [DefaultReserve] (5 ms), at most [DefaultReserveFraction] of the
// time left; a reserve given here is kept whole (bound it with
// WithPropagate(propagate.WithMaxReserveFraction(f))).
func WithReserve(d time.Duration) Option {
	return optionFunc(func(c *config) { c.reserve, c.reserveSet = max(d, 0), true })
}

// Without leaves layers out of the stack, e.g. Without(Hedge) for a client whose
// calls must never be sent twice at once. The other layers keep their order.
func Without(layers ...Layer) Option {
	return optionFunc(func(c *config) {
		for _, l := range layers {
			if l >= Propagate && l <= Keys {
				c.without[l] = true
			}
		}
	})
}

// WithIdempotentMethods declares gRPC methods ("/pkg.Service/Method") that may safely
// run twice, for the retry and hedge layers at once, beside those whose descriptor
// declares an idempotency_level.
func WithIdempotentMethods(methods ...string) Option {
	return optionFunc(func(c *config) { c.idempotent = append(c.idempotent, methods...) })
}

// WithSharedHedger makes the client's hedging layer use h, so that several clients share
// one latency window per target, one extra-load cap and one set of statistics
// ([hedge.Hedger.Stats]). Options given with [WithHedge] are then ignored: h has its
// own; the methods of [WithIdempotentMethods] are still hedged on this client's
// calls. Default: each [NewTransport] and [DialOptions] makes a Hedger of its own.
func WithSharedHedger(h *hedge.Hedger) Option {
	return optionFunc(func(c *config) { c.hedger = h })
}

// WithPropagate passes options to the propagate layer, after the stack's own
// (floor, reserve): they take precedence.
func WithPropagate(opts ...propagate.Option) Option {
	return optionFunc(func(c *config) { c.propagate = append(c.propagate, opts...) })
}

// WithShortCircuit passes options to the shortcircuit layer (the server's guard),
// after the stack's own floor: they take precedence.
func WithShortCircuit(opts ...shortcircuit.Option) Option {
	return optionFunc(func(c *config) { c.shortcircuit = append(c.shortcircuit, opts...) })
}

// WithRetry passes options to the retry layer, after the stack's own (the least
// budget of an attempt): they take precedence. Share one retry budget between
// clients with WithRetry(retry.WithBudget(b)).
func WithRetry(opts ...retry.Option) Option {
	return optionFunc(func(c *config) { c.retry = append(c.retry, opts...) })
}

// WithHedge passes options to the hedge layer, after the stack's own (the hedge
// floor): they take precedence.
func WithHedge(opts ...hedge.Option) Option {
	return optionFunc(func(c *config) { c.hedge = append(c.hedge, opts...) })
}

// WithBreaker passes options to the breaker layer (one circuit per target, which
// knows the deadline, and sends less to a target that refuses for load: see
// package breaker). The adaptive throttle is on by default;
// WithBreaker(breaker.WithoutAdaptiveThrottling()) turns it off.
func WithBreaker(opts ...breaker.Option) Option {
	return optionFunc(func(c *config) { c.breaker = append(c.breaker, opts...) })
}

// WithSharedBreaker makes the client's breaker layer use b, so that several clients
// share its circuits (one per target) and the user can read its state
// ([breaker.Breaker.State], [breaker.Breaker.Stats]). Options given with
// [WithBreaker] are then ignored: b has its own. Default: each [NewTransport] and
// [DialOptions] makes a Breaker of its own.
func WithSharedBreaker(b *breaker.Breaker) Option {
	return optionFunc(func(c *config) { c.circuits = b })
}

func (c *config) newBreaker() *breaker.Breaker {
	if c.circuits != nil {
		return c.circuits
	}
	return breaker.New(c.breaker...)
}

func (c *config) has(l Layer) bool { return !c.without[l] }

func (c *config) propagateOptions() []propagate.Option {
	o := []propagate.Option{propagate.WithFloor(c.floor), propagate.WithReserve(c.reserve)}
	if !c.reserveSet {
		o = append(o, propagate.WithMaxReserveFraction(DefaultReserveFraction))
	}
	return append(o, c.propagate...)
}

func (c *config) shortcircuitOptions() []shortcircuit.Option {
	if !c.floorSet {
		return c.shortcircuit // the guard learns its floor
	}
	return append([]shortcircuit.Option{shortcircuit.WithFloor(c.floor)}, c.shortcircuit...)
}

// attemptFloor is the least time left for which another copy of a call (a hedge, a
// retry) goes out: what the downstream's guard demands, plus the reserve.
func (c *config) attemptFloor() time.Duration { return c.floor + c.reserve }

func (c *config) retryOptions() []retry.Option {
	o := []retry.Option{retry.WithFloor(c.attemptFloor())}
	if len(c.idempotent) > 0 {
		o = append(o, retry.WithIdempotentMethods(c.idempotent...))
	}
	return append(o, c.retry...)
}

func (c *config) newHedger() *hedge.Hedger {
	if c.hedger != nil {
		return c.hedger
	}
	o := []hedge.Option{hedge.WithFloor(c.attemptFloor())}
	if len(c.idempotent) > 0 {
		o = append(o, hedge.WithIdempotentMethods(c.idempotent...))
	}
	return hedge.New(append(o, c.hedge...)...)
}

// sharedIdempotent is what the client declares idempotent that its Hedger does not
// know: the methods of [WithIdempotentMethods] when the Hedger is shared
// ([WithSharedHedger]), which has options of its own; nil otherwise.
func (c *config) sharedIdempotent() []string {
	if c.hedger == nil {
		return nil
	}
	return c.idempotent
}

// dedupConfig is the server's deduplication ([WithDedup]): off without a store.
type dedupConfig struct {
	store dedup.Store
	opts  []dedup.Option
}

// WithDedup puts deduplication of requests carrying an idempotency key (package
// dedup) on store into [NewHandler], [ServerOptions] (unary calls) and connectkit's
// HandlerOption, innermost: after the guard, just before the handler, so that a
// request the guard refuses records nothing. A repeat waits for the first's answer
// until its deadline less the stack's floor ([WithFloor]), or less
// dedup.MinRefusalReserve (10 ms) when that is more; opts come after the stack's own
// and take precedence. Default: off (no store).
//
// A handler under it that writes downstream through the stack with
// retry.WithIdempotencyKeys sends keys derived from its request's key, so that a
// re-run after a crash meets the downstream's stored answers (package dedup, "Keys
// travel"); dedup.WithoutKeyDerivation among opts turns that off.
func WithDedup(store dedup.Store, opts ...dedup.Option) Option {
	return optionFunc(func(c *config) { c.dedup = dedupConfig{store: store, opts: opts} })
}

func (c *config) dedupOptions() []dedup.Option {
	return append([]dedup.Option{dedup.WithFloor(c.floor)}, c.dedup.opts...)
}
