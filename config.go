package deadlinekit

import (
	"time"

	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// DefaultReserve is the time a client keeps for itself from the budget it passes on:
// the downstream is told (time left − reserve), so that the answer arrives while the
// caller can still use it. It goes with the floor ([deadline.DefaultFloor]) so that
// no layer undoes another's work: a client never sends a request with less time than
// the downstream's guard demands, and never hedges or retries with less than that
// plus its reserve.
const DefaultReserve = 5 * time.Millisecond

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
	without        [Breaker + 1]bool
	idempotent     []string
	hedger         *hedge.Hedger
	circuits       *breaker.Breaker
	propagate      []propagate.Option
	shortcircuit   []shortcircuit.Option
	retry          []retry.Option
	hedge          []hedge.Option
	breaker        []breaker.Option
	dedup          dedupConfig
}

func newConfig(opts []Option) *config {
	c := &config{floor: deadline.DefaultFloor, reserve: DefaultReserve}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	return c
}

// WithFloor sets the least budget a hop is worth starting with, for every layer at
// once: the server's guard refuses a request with less left (shortcircuit), the
// client does not send one with less after its reserve (propagate), and hedges and
// retries go out only with at least floor + reserve left (hedge, retry), since
// anything less would be refused downstream. Zero or less turns the floors off.
// Default [deadline.DefaultFloor] (20 ms).
func WithFloor(d time.Duration) Option {
	return optionFunc(func(c *config) { c.floor = max(d, 0) })
}

// WithReserve sets the time a client keeps for itself from the budget it passes on
// (propagate's reserve); hedges and retries need floor + reserve. Zero or less: none.
// Default [DefaultReserve] (5 ms).
func WithReserve(d time.Duration) Option {
	return optionFunc(func(c *config) { c.reserve = max(d, 0) })
}

// Without leaves layers out of the stack, e.g. Without(Hedge) for a client whose
// calls must never be sent twice at once. The other layers keep their order.
func Without(layers ...Layer) Option {
	return optionFunc(func(c *config) {
		for _, l := range layers {
			if l >= Propagate && l <= Breaker {
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
// own. Default: each [NewTransport] and [DialOptions] makes a Hedger of its own.
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
// knows the deadline: see package breaker).
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
	return append([]propagate.Option{propagate.WithFloor(c.floor), propagate.WithReserve(c.reserve)}, c.propagate...)
}

func (c *config) shortcircuitOptions() []shortcircuit.Option {
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

// dedupConfig is the server's deduplication ([WithDedup]): off without a store.
type dedupConfig struct {
	store dedup.Store
	opts  []dedup.Option
}

// WithDedup puts deduplication of requests carrying an idempotency key (package
// dedup) on store into [NewHandler], [ServerOptions] (unary calls) and connectkit's
// HandlerOption, innermost: after the guard, just before the handler, so that a
// request the guard refuses records nothing. A repeat waits for the first's answer
// until its deadline less the stack's floor ([WithFloor]); opts come after the
// stack's own and take precedence. Default: off (no store).
func WithDedup(store dedup.Store, opts ...dedup.Option) Option {
	return optionFunc(func(c *config) { c.dedup = dedupConfig{store: store, opts: opts} })
}

func (c *config) dedupOptions() []dedup.Option {
	return append([]dedup.Option{dedup.WithFloor(c.floor)}, c.dedup.opts...)
}
