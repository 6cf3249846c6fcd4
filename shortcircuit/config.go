package shortcircuit

import (
	"context"
	"math"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
)

// Option configures a guard built by [NewMiddleware], [UnaryServerInterceptor] or
// [StreamServerInterceptor].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	floor     time.Duration
	floorFunc func(route string) time.Duration
	adaptive  *Adaptive // given with WithAdaptiveFloor
	// learned: no static floor was given, so the floor is learned from the handler
	// (DefaultAdaptive) unless WithAdaptiveFloor says how; stream: the guard of
	// streams, whose lives are no service time to learn a floor from.
	learned, stream bool
	observers       []func(context.Context, Event)

	maxConcurrency int // zero: no limit (unless adaptiveLimit)
	adaptiveLimit  *AdaptiveLimit
	maxQueue       int // negative: DefaultQueueFactor × the limit
	order          QueueOrder
}

func newConfig(opts []Option) config {
	c := config{floor: deadline.MinFloor, learned: true, maxQueue: -1}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.adaptive == nil && c.learned && !c.stream {
		a := defaultAdaptive()
		c.adaptive = &a
	}
	return c
}

// WithFloor sets a static floor for every request: a request with less than d left
// is refused before the handler runs, and the floor is no longer learned (unless
// [WithAdaptiveFloor] is given too: the larger of the two is then in force). With
// zero (or less), only requests already past their deadline are refused.
//
// Default: the floor follows what the route's handler takes. Each route (the gRPC
// method, the HTTP pattern or path) learns the 5th percentile (P5) of its handler's
// recent successful durations ([DefaultAdaptive]: the last 10 s, once 20 are known),
// held between [deadline.MinFloor] (1 ms) and 1 s; until a route has learned, and
// for a route past [Adaptive].MaxRoutes, its floor is 1 ms. A request is refused
// only when 95% of the route's recent calls took longer than it has left: a 2 ms
// handler admits a request with 3 ms left, a 50 ms one refuses a request with
// 30 ms. A duration is the handler's own, from when it got its slot (a wait in the
// guard's queue is not its work) to when it returned. A gateway's includes its
// downstream's queue, which varies with the downstream's load: P5 keeps what
// repeats (the downstream's work without a queue) and leaves the queue to the
// downstream's guard, which knows it. Of what P5 refuses, 2.4% would have finished
// on a lognormal route and none on such a gateway; of what the median (the floor
// of earlier versions) refused, 13% and 8% would have (the package's test
// TestLearnedFloorRefusesOnlyWhatCannotFinish runs every refused request anyway).
// What the floor admits and cannot finish is cut at its deadline; where that work
// costs more than a refusal, set a higher [Adaptive].Quantile. The upper bound (1 s,
// not the 20 ms static floor of earlier versions) is what lets a slow route refuse
// what it cannot finish; it only bounds the damage of a handler that turns very
// slow. A stream's guard learns nothing by default (a stream's life is no service
// time): its floor is 1 ms.
func WithFloor(d time.Duration) Option {
	return optionFunc(func(c *config) { c.floor, c.learned = max(d, 0), false })
}

// WithFloorFunc sets a floor per route, computed by f from the route key: the gRPC
// full method ("/package.Service/Method"), or for HTTP the request's Pattern when a
// [net/http.ServeMux] has set it, else its URL path. f is called once per request that
// has a deadline, on the request's goroutine; it must be fast and safe for concurrent
// use. A map lookup is the usual body:
//
//	floors := map[string]time.Duration{"/shop.Cart/Checkout": 80 * time.Millisecond}
//	shortcircuit.WithFloorFunc(func(route string) time.Duration { return floors[route] })
//
// The floor in force is the largest of f's result, the static floor ([WithFloor]) and
// the adaptive floor ([WithAdaptiveFloor]), so a route whose floor should be lower
// than the others' takes the common value from f, not from WithFloor. A nil f removes
// the per-route floor.
func WithFloorFunc(f func(route string) time.Duration) Option {
	return optionFunc(func(c *config) { c.floorFunc = f })
}

// Adaptive configures the adaptive floor: a quantile of the durations of a route's
// recent successful calls (gRPC: the handler returned nil; HTTP: a status below 500;
// a stream's whole life; never a call whose context ended while its handler ran,
// whose duration is the budget it was given), each the handler's own from when it
// got its slot, learned after the handler returns and read without a lock on the
// admit path. A route has a floor once its window holds MinSamples durations, held
// between Min and Max and never above the durations it was read from (the window
// keeps them in bins up to a sixteenth wide; the floor is a bin's low edge). It is
// plain data; zero fields take the value of [DefaultAdaptive].
//
// When the handler slows down, the floor (P5) reaches the new speed once slow calls
// are more than 95% of the window, at the latest one Window after the change; until
// then it admits what the old speed would have finished, and the deadline cuts what
// the new one does not. It falls as soon as fast calls are 5% of the window. A
// higher quantile follows a slowdown sooner and a speed-up later. A route whose
// window empties (nothing succeeded for a whole Window, say because the floor
// refused everything) loses its floor until it has learned again, so the guard
// cannot lock a route out for good; and Max bounds the damage of a handler that
// turns very slow.
type Adaptive struct {
	// Quantile of the successful durations used as the floor, in (0, 1]. 0.05 (P5,
	// the default) refuses a request only when it has less time left than 95% of
	// the recent calls took; 0.5 (the median, the default of earlier versions)
	// refuses it when half took longer, and so refuses requests of which up to half
	// would have finished; 0.9 is stricter still.
	Quantile float64
	// Window is how long a duration counts, and Buckets how many steps the window
	// moves in: durations leave it Window/Buckets at a time. Buckets is at most
	// 1000; more count as 1000.
	Window  time.Duration
	Buckets int
	// MinSamples is the number of durations the window of a route must hold before
	// the route has an adaptive floor.
	MinSamples int
	// Min and Max bound the adaptive floor. A zero Max takes the default (1 s), a
	// Max below Min counts as Min; for no upper bound, set a large Max.
	Min, Max time.Duration
	// MaxRoutes bounds the number of routes learned, and so the memory used (up to
	// about 4 KiB per bucket in use per route). Routes past the bound have no
	// adaptive floor. HTTP route keys that are URL paths come from the client: key
	// on Patterns, or keep the bound low.
	MaxRoutes int
}

// DefaultAdaptive is the adaptive floor's default, and the floor of a guard given no
// [WithFloor]: the 5th percentile (P5) of the successful durations of the last 10 s
// (10 buckets of 1 s), once 20 are known (of 20, P5 is the shortest), between 1 ms
// ([deadline.MinFloor]) and 1 s, for at most 256 routes. A program may set it for
// the guards it makes next; a zero field of it takes the figure above.
var DefaultAdaptive = Adaptive{
	Quantile:   0.05,
	Window:     10 * time.Second,
	Buckets:    10,
	MinSamples: 20,
	Min:        deadline.MinFloor,
	Max:        time.Second,
	MaxRoutes:  256,
}

// builtinAdaptive is DefaultAdaptive as the package sets it: what a zero field of
// DefaultAdaptive takes.
var builtinAdaptive = DefaultAdaptive

func (a Adaptive) withDefaults() Adaptive { return a.filled(defaultAdaptive()) }

// defaultAdaptive is DefaultAdaptive with its zero fields, Min included, set to
// builtinAdaptive's.
func defaultAdaptive() Adaptive {
	d := DefaultAdaptive
	if d.Min == 0 {
		d.Min = builtinAdaptive.Min
	}
	return d.filled(builtinAdaptive)
}

// filled returns a with its zero (or out of range) fields set to d's, and its
// values held to their bounds.
func (a Adaptive) filled(d Adaptive) Adaptive {
	if a.Quantile <= 0 || math.IsNaN(a.Quantile) {
		a.Quantile = d.Quantile
	}
	a.Quantile = min(a.Quantile, 1)
	if a.Window <= 0 {
		a.Window = d.Window
	}
	if a.Buckets <= 0 {
		a.Buckets = d.Buckets
	}
	if a.MinSamples <= 0 {
		a.MinSamples = d.MinSamples
	}
	a.Min = max(a.Min, 0)
	if a.Max <= 0 {
		a.Max = d.Max
	}
	a.Max = max(a.Max, a.Min)
	if a.MaxRoutes <= 0 {
		a.MaxRoutes = d.MaxRoutes
	}
	return a
}

// WithAdaptiveFloor sets how the floor is learned, per route from the handler's own
// recent successful durations (see [Adaptive] for how it follows a handler that
// slows down or speeds up), and keeps it learned beside a static [WithFloor]. Without
// any floor option the guard learns with [DefaultAdaptive].
//
// For HTTP, telling success needs the response status, so with an adaptive floor the
// guard hands the handler a wrapped [net/http.ResponseWriter] (one allocation per
// request). The wrapper implements http.Flusher and Unwrap, so
// [net/http.ResponseController] reaches every feature of the original writer.
func WithAdaptiveFloor(a Adaptive) Option {
	a = a.withDefaults()
	return optionFunc(func(c *config) { c.adaptive = &a })
}

// WithObserver adds an observer, called once per request the guard sees: on refusal,
// before the refusal is written, and on admission, after the handler has returned (not
// if it panicked). It may be given several times; observers are called in order, on
// the request's goroutine, so they must be fast and safe for concurrent use.
func WithObserver(f func(ctx context.Context, e Event)) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.observers = append(c.observers, f)
		}
	})
}

// DefaultQueueFactor sets the queue's default bound: this many requests per slot of
// the concurrency limit (of the current limit, for an adaptive one). The queue admits
// only requests predicted to finish in time; its bound caps the time an admitted
// request waits (about one service time at 1 per slot) and holds the requests without
// a deadline; past it, a request is refused as overloaded.
const DefaultQueueFactor = 1

// WithMaxConcurrency caps the handlers running at once at n, one limit per guard
// shared by its routes: a request beyond the cap
// waits in a queue ([WithQueue]) for a free slot, or is refused when it cannot finish
// in time. Zero or less: no cap (the default, unless [WithAdaptiveConcurrency]).
func WithMaxConcurrency(n int) Option {
	return optionFunc(func(c *config) {
		c.maxConcurrency = max(n, 0)
		if n > 0 {
			c.adaptiveLimit = nil
		}
	})
}

// AdaptiveLimit configures the adaptive concurrency limit. It is plain data; zero
// fields take the value of [DefaultAdaptiveLimit].
//
// The rule asks whether the handler's latency grows with its concurrency, not
// whether it grew. It runs the limit in three windows: an upper one at the limit, a
// lower one an eighth below it (at least one below), an upper one again. The first
// begins when the limit first holds a request back. Each measures from when the
// handlers in flight reach its limit (at the latest one mean handler duration after
// it takes force), and only the requests admitted from then on: a request admitted
// under the previous limit waited inside the handler behind the requests that limit
// let in, and measures that limit. An upper window lasts at least Samples/2
// completions and four mean durations, the lower one Samples/4 and two; while the
// limit falls, an upper window lasts Samples/4 completions and one mean duration,
// and so does the lower one after a fall (nearly) all the way to it. Each
// measures the time-averaged handlers in flight, n, and their mean duration,
// s; the lower window is compared with the mean of the two upper ones around it, so
// a handler that turns slower or faster steadily across them cancels out. The
// elasticity e = ln(s_upper/s_lower) / ln(n_upper/n_lower) is near 0 when the
// extra handlers ran as fast as the others (throughput n/s grew with them) and near
// 1 when every request took longer in proportion (throughput stayed; the extra
// requests only waited inside the handler for a resource the limit is above).
// Below Tolerance, the limit grows if it held a request back in an upper window
// (the toolkit's own queue, or its refusals, tell demand beyond the limit), by an
// eighth (at least one), doubling from the third grow in a row, at most half the
// limit. From Tolerance on, it falls to where the two windows' throughput places
// the knee, never past the lower window; after a fall all the way to it (or to
// within a quarter of the gap above it), the next lower window goes twice as far
// below (at least a quarter, at most half the limit; the first one, below Initial,
// half), so a limit far off closes in within a few rounds without falling past a
// limit it has not measured: from 20 over a pool of 8 slots, 0.3 s on
// BENCHMARKS.md's loopback bench (1.4 s before windows counted only the requests
// admitted under their limit). Such a wide lower window goes further down when
// Little's law places the knee lower (the first upper window's throughput times the
// handler's unloaded duration, or the fastest duration seen while that is not known;
// at least an eighth of the limit, where a handler with fast answers among slow ones
// sends it), and one at most half the limit that kept the upper window's throughput
// decides its round without a second upper window: from 20 over 4 slots of 100 ms,
// the limit is at 5 after 1.7 s in the tests' model (over 4 s before), and the
// handlers in flight at 4 from 1.35 s. When a limit falls, the service time the
// guard's queue predicts with falls in proportion (not below the unloaded duration),
// and the requests admitted before the fall do not count in it. When the upper
// windows' durations differ by more than 25% (the handler changed speed meanwhile; by
// more than 10%, for a grow), or the load, not the limit, set the concurrency (n no
// higher in the upper windows, or the lower window short of its limit), the limit
// holds. Only the durations inside the handler count, never the wait in the toolkit's
// queue, which the limit itself causes.
//
// A handler that turns slower for every request, however many run (a slower
// dependency, a colder cache), scales all windows alike and leaves e, and the
// limit, where they were: the limit sheds no capacity the handler still has. A
// rule that compares latency with a remembered unloaded latency (Envoy's gradient
// controller, Netflix's Gradient2, the rule this one replaced) reads such a
// slowdown as queueing and cuts the limit until its next measure of the unloaded
// latency.
//
// Settled, the limit keeps a step of headroom above the knee. When a grow buys
// nothing, the limit stays where it grew to, a step above the last limit that
// bought throughput, instead of going back: its lower window then runs at the knee,
// not below it, and a request is ready to start the moment another ends. (Handing
// a freed slot to a queued request takes a goroutine's wake-up, about half a
// millisecond on a busy machine; a limit exactly at the knee leaves the handler one
// short for it after every end, 6% of a 10 ms handler's throughput.) The price is a
// step of latency inside the handler: an eighth, a quarter at a knee of 4. The
// request let in on that step waits inside the handler, in its order, not by
// level, so while the limit holds the step only the highest level seen lately
// may take it: a critical request is never handed the slot after a sheddable one
// that came before it. A round that measured nothing with the step so kept (the
// highest level too rare to fill it) opens it to every level for the next. After a
// round's hold, and whenever the handler turns 20% slower, a round rechecks the knee
// with its lower window two steps below the limit, a step below the knee: if the
// throughput the two windows measured still places the knee where it was, the
// headroom holds twice as long (up to eight rounds); if lower, the limit falls to
// it. A knee that rose shows as a gain in any round, and the limit grows.
//
// A lower window that bought throughput (elasticity under Tolerance) ran below the
// knee, so its mean duration is the handler's unloaded one. A later lower window
// that runs within a tenth of it was not above the knee, whatever the round's
// elasticity: the knee is then where Little's law puts the upper windows'
// throughput at that speed (throughput × unloaded duration), and a fall settles a
// step above it at once, a recheck it would make is skipped (the knee is no
// lower), instead of sending a window twice as far below to find out. The
// remembered duration only ever confirms a window that ran at it: a handler that
// turns slower runs every window slower, none is confirmed, and the rule measures
// as above; one that turns 20% faster forgets it. Over a knee that falls from 8 to
// 4 the limit in force then goes no lower than the knee (to half of it before).
// Each round
// in a row that keeps the limit also doubles the upper windows, up to eight times,
// while the handler's mean duration stays within 20% of the last upper window's. In
// the fake-time model of the tests the limit runs below the knee for under 1% of the
// time (11% under the rule before the steady state) and answers as many requests as
// a static limit a step above the knee.
//
// Tolerance trades latency for throughput where requests slow with concurrency
// without losing it (a saturation backend): at 0.5 the limit settles a step above
// the knee; at 0.9 further above it. In BENCHMARKS.md's saturation cell 0.9 gains no
// goodput over 0.5 now that 0.5 keeps a step of headroom, at 1.3 times the answers'
// p99.
//
// Headroom widens the headroom for a handler whose work runs elsewhere (a
// database, a dependency's workers, a shared disk): that work goes on while this
// process stalls (a garbage collection, a busy or stolen core), and the requests
// finished meanwhile wait to be handed back; until they are, fewer than the knee
// work, and a step of headroom covers one hand-off, not a stall of several
// milliseconds. At Headroom 1 the limit settles at twice the knee (a grow that buys
// nothing, a fall and a recheck all place it there), and a recheck's lower window
// still goes a step below the knee. In BENCHMARKS.md's shared saturation cells
// (the knee's capacity shared among the requests working) it gains 0.6 to 1.6 points
// of goodput over the default and leaves 1.6–3.3% of the backend's capacity unused
// instead of 3.8–4.5%, at about twice the answers' p99; in the mixed-budget cell it
// loses 1.6 points and refuses more short-budget requests late. Where the work is
// this process's own CPU a stall stops it too, and headroom only adds latency: keep
// the default.
type AdaptiveLimit struct {
	// Min and Max bound the limit; Initial is where it starts.
	Min, Max, Initial int
	// Tolerance is the elasticity from which the limit falls: 0.5 (the default)
	// lets the limit grow while the extra concurrency buys at least half its share
	// of throughput.
	Tolerance float64
	// Samples is the least number of completions the upper window measures.
	Samples int
	// Headroom is how far above the knee the limit settles, as a share of the
	// knee (at least one handler): 0, the default, is a step (an eighth, the
	// rule above); 1 settles at twice the knee. Outside (0, 10] it is 0.
	Headroom float64
}

// DefaultAdaptiveLimit is the adaptive limit's default: between 1 and 1000 handlers
// at once, from 20, tolerance 0.5, 48 samples an upper window. A program may set it
// for the guards it makes next; a zero field of it takes the figure above.
var DefaultAdaptiveLimit = AdaptiveLimit{Min: 1, Max: 1000, Initial: 20, Tolerance: 0.5, Samples: 48}

// builtinAdaptiveLimit is DefaultAdaptiveLimit as the package sets it: what a zero
// field of DefaultAdaptiveLimit takes.
var builtinAdaptiveLimit = DefaultAdaptiveLimit

func (a AdaptiveLimit) withDefaults() AdaptiveLimit {
	return a.filled(DefaultAdaptiveLimit.filled(builtinAdaptiveLimit))
}

// filled returns a with its zero (or out of range) fields set to d's, and its
// values held to their bounds.
func (a AdaptiveLimit) filled(d AdaptiveLimit) AdaptiveLimit {
	if a.Min <= 0 {
		a.Min = d.Min
	}
	if a.Max <= 0 {
		a.Max = d.Max
	}
	a.Max = max(a.Max, a.Min)
	if a.Initial <= 0 {
		a.Initial = d.Initial
	}
	a.Initial = min(max(a.Initial, a.Min), a.Max)
	if !(a.Tolerance > 0) || a.Tolerance > 10 {
		a.Tolerance = d.Tolerance
	}
	if a.Samples <= 0 {
		a.Samples = d.Samples
	}
	if !(a.Headroom > 0) || a.Headroom > 10 {
		a.Headroom = 0
	}
	return a
}

// WithAdaptiveConcurrency caps the handlers running at once with a limit that follows
// the handler's latency ([AdaptiveLimit]); beyond it requests queue as with
// [WithMaxConcurrency], which it replaces. Pass [DefaultAdaptiveLimit] for the
// defaults.
func WithAdaptiveConcurrency(a AdaptiveLimit) Option {
	a = a.withDefaults()
	return optionFunc(func(c *config) {
		c.adaptiveLimit = &a
		c.maxConcurrency = 0
	})
}

// withoutLimit makes the guard of streams: no concurrency limit, and no floor learned
// unless [WithAdaptiveFloor] asks for one.
func withoutLimit() Option {
	return optionFunc(func(c *config) { c.maxConcurrency, c.adaptiveLimit, c.stream = 0, nil, true })
}

// WithQueue sets the queue of the concurrency limit: at most n requests wait for a
// slot (zero: none wait; a request that finds every slot taken is refused), served
// in the given order. Default: as many as the limit has slots ([DefaultQueueFactor]),
// [FIFO].
//
// The queue admits a request only if its predicted wait plus the work fits in its
// time left (a request that finds a slot free and none queued takes it when its
// route's floor is learned: that floor has refused what has little chance to
// finish); the work is the handler's mean duration and twice its deviation (as
// TCP's retransmission timer; before any handler has ended, as long as the oldest
// running one has run), and the wait is read from the slots: when each
// running handler started, so when it should end, and how many queued requests go
// first. A request that arrives just after every slot was taken waits nearly a
// whole handler duration however many slots there are; a prediction from the
// slots' mean rate alone (one frees every duration ÷ slots) would queue a request
// that cannot finish and drop it later, after its caller lost the time to go
// elsewhere.
//
// FIFO keeps every refusal fast: a request that the queue could not serve in time is
// refused on arrival, and the ones it holds are served in time (at one level: a
// request of a lower level may be overtaken by higher ones arriving after it, and
// leave the queue refused, or displaced). LIFO answers the
// admitted requests sooner under overload (in BENCHMARKS.md, at 2× and 4× of
// capacity with a queue of 4 per slot, a p50 of 12–13 ms where FIFO took 51–52 ms, at
// the same goodput) but refuses late: the requests it serves last wait until they
// can no longer finish, or until a newcomer evicts them. EarliestDeadline was no
// better than FIFO there. A shorter queue is the other way to a lower latency.
//
// The queue is where the levels of package criticality are told apart (queue.go):
// it serves the higher levels first, in the order above within each, and a full
// queue gives a newcomer a lower level's place. With n = 0 there is no queue: a slot
// that frees goes to whichever request arrives next, whatever its level, and the
// levels are not told apart.
func WithQueue(n int, order QueueOrder) Option {
	return optionFunc(func(c *config) {
		c.maxQueue = max(n, 0)
		if order <= EarliestDeadline {
			c.order = order
		}
	})
}
