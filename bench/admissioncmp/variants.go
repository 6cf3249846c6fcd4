// Package admissioncmp compares server-side admission control under overload on
// loopback: no guard, deadlinekit's shortcircuit (its static floor; a static and an
// adaptive concurrency limit, whose queue admits only requests predicted to finish
// in time; the queue's three orders), failsafe-go's adaptivelimiter and bulkhead,
// and platinummonkey/go-concurrency-limits (Vegas, its default limit, and Gradient2).
//
// The server has a known capacity: 8 worker slots, each request holding one for
// 10 ms, 800 requests per second. Holding a slot stands in for CPU work (the
// machine that runs the figures has 2 cores, shared with the load generator). Its
// handler either stops when its context ends, waiting for a slot included
// ([Stops]), or ignores its context, as CPU-bound code or a library that takes
// none does ([Ignores]). The toolkit's propagate middleware is outermost, so the
// request's context carries the caller's deadline from grpc-timeout; the variant's
// guard wraps the handler inside it. The server speaks HTTP/2 without TLS (h2c), as
// gRPC does.
//
// The client is an open loop: Poisson arrivals at a multiple of the capacity,
// each request with a deadline drawn uniformly from [50 ms, 300 ms], sent through
// propagate.NewTransport (which writes grpc-timeout). It records each request's
// fate: answered 200 before its deadline, refused (another status, before the
// deadline), or no answer in time. The server records how long its handlers held
// slots, and how much of that was for requests whose context had ended (deadline
// passed, or caller gone) when the work ended: wasted work. cmd/admissionbench runs
// it and prints markdown tables.
//
// A cell can also change the server's work ([Shape]): a slowdown of every request
// by a factor for a while, whatever the concurrency, or the saturation backend
// (no slots: beyond a knee every request slows in proportion to how many work at
// once, and the knee can move). Its arrivals can come at a fixed rate, and a share
// of its requests can get short budgets. Each round's figures are kept
// ([Result.Rounds]) with their medians ([Result.Med]); the rounds alternate the
// variants' order, so a neighbour's burst of CPU steal falls on all of them.
package admissioncmp

import (
	"net/http"
	"strconv"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/bulkhead"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/platinummonkey/go-concurrency-limits/core"
	"github.com/platinummonkey/go-concurrency-limits/limit"
	"github.com/platinummonkey/go-concurrency-limits/limiter"
	"github.com/platinummonkey/go-concurrency-limits/strategy"

	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// The server's capacity, and the floor the guards that take one are given: the
// work's duration.
const (
	Workers = 8
	Work    = 10 * time.Millisecond
	Floor   = Work
)

// Variant is one admission control under test.
type Variant struct {
	Name string
	// Note says exactly how it is configured.
	Note string
	// Guard returns fresh middleware (its own state) for one cell's server; nil: no guard.
	Guard func() func(http.Handler) http.Handler
}

// Variants returns the configurations compared, in the order of the tables.
func Variants() []Variant {
	return []Variant{
		{Name: "no guard", Note: "the server as is: propagate's middleware and the handler"},
		{
			Name: "deadlinekit shortcircuit, static floor",
			Note: "shortcircuit.NewMiddleware(shortcircuit.WithFloor(10 ms)): refuses a request with less than 10 ms left on arrival, no concurrency limit",
			Guard: func() func(http.Handler) http.Handler {
				return shortcircuit.NewMiddleware(shortcircuit.WithFloor(Floor))
			},
		},
		{
			Name: "deadlinekit shortcircuit, static limit 8",
			Note: "shortcircuit.NewMiddleware(WithFloor(10 ms), WithMaxConcurrency(8)): the default queue (DefaultQueueFactor 1 × 8 = 8, FIFO) admits a request only when its predicted wait plus the service time fits in the time left",
			Guard: func() func(http.Handler) http.Handler {
				return shortcircuit.NewMiddleware(shortcircuit.WithFloor(Floor), shortcircuit.WithMaxConcurrency(Workers))
			},
		},
		{
			Name: "deadlinekit shortcircuit, adaptive limit",
			Note: "shortcircuit.NewMiddleware(WithFloor(10 ms), WithAdaptiveConcurrency(DefaultAdaptiveLimit)): from 20, in [1, 1000]; windows upper, lower (an eighth below), upper; the elasticity of the handler's mean duration to the handlers in flight decides (tolerance 0.5); default queue (1 × the current limit, FIFO) with the same admission by predicted wait",
			Guard: func() func(http.Handler) http.Handler {
				return shortcircuit.NewMiddleware(shortcircuit.WithFloor(Floor), shortcircuit.WithAdaptiveConcurrency(shortcircuit.DefaultAdaptiveLimit))
			},
		},
		{
			Name: "deadlinekit shortcircuit, adaptive limit, from 8",
			Note: "the adaptive limit started at the capacity, as failsafe-go's \"from 8\" variant is: WithAdaptiveConcurrency(AdaptiveLimit{Initial: 8}), the other fields their defaults",
			Guard: func() func(http.Handler) http.Handler {
				return shortcircuit.NewMiddleware(shortcircuit.WithFloor(Floor), shortcircuit.WithAdaptiveConcurrency(shortcircuit.AdaptiveLimit{Initial: Workers}))
			},
		},
		{
			Name: "deadlinekit shortcircuit, adaptive limit, tolerance 0.9",
			Note: "WithAdaptiveConcurrency(AdaptiveLimit{Tolerance: 0.9}): the limit grows while the extra concurrency buys a tenth of its share of throughput, so it settles above a knee rather than at it (more goodput where per-request gaps cost throughput, more latency)",
			Guard: func() func(http.Handler) http.Handler {
				return shortcircuit.NewMiddleware(shortcircuit.WithFloor(Floor), shortcircuit.WithAdaptiveConcurrency(shortcircuit.AdaptiveLimit{Tolerance: 0.9}))
			},
		},
		{
			Name: "deadlinekit shortcircuit, adaptive limit, headroom 1",
			Note: "WithAdaptiveConcurrency(AdaptiveLimit{Headroom: 1}): the limit settles at twice the knee instead of a step above it, so the backend still has work queued when the process that feeds it stalls (more goodput where it keeps working meanwhile, more latency inside the handler)",
			Guard: func() func(http.Handler) http.Handler {
				return shortcircuit.NewMiddleware(shortcircuit.WithFloor(Floor), shortcircuit.WithAdaptiveConcurrency(shortcircuit.AdaptiveLimit{Headroom: 1}))
			},
		},
		{
			Name: "deadlinekit shortcircuit, adaptive limit, headroom 1.5",
			Note: "WithAdaptiveConcurrency(AdaptiveLimit{Headroom: 1.5}): the limit settles at two and a half times the knee, where failsafe-go's adaptive limiter runs in the saturation cells (what matching its goodput there costs in latency)",
			Guard: func() func(http.Handler) http.Handler {
				return shortcircuit.NewMiddleware(shortcircuit.WithFloor(Floor), shortcircuit.WithAdaptiveConcurrency(shortcircuit.AdaptiveLimit{Headroom: 1.5}))
			},
		},
		{
			Name: "failsafe-go v0.9.8 adaptivelimiter, defaults",
			Note: "failsafehttp.NewHandler(h, adaptivelimiter.NewWithDefaults[*http.Response]()): limit from 20 in [1, 200], max limit factor 5, p90 of a 1–30 s window of ≥ 50 samples; no queue: a request over the limit is refused at once (429)",
			Guard: func() func(http.Handler) http.Handler {
				l := adaptivelimiter.NewWithDefaults[*http.Response]()
				return func(next http.Handler) http.Handler { return failsafehttp.NewHandler(next, l) }
			},
		},
		{
			Name: "failsafe-go v0.9.8 adaptivelimiter, from 8, queueing",
			Note: "adaptivelimiter.NewBuilder[*http.Response]().WithLimits(1, 200, 8).WithQueueing(2, 3).Build() (the queueing factors BuildPrioritized defaults to): queues up to 2 × the limit, then rejects gradually up to 3 ×; a queued request waits until its context ends (the executor is given the request's context, failsafe.With(l).WithContext(r.Context()), per request)",
			Guard: func() func(http.Handler) http.Handler {
				l := adaptivelimiter.NewBuilder[*http.Response]().WithLimits(1, 200, Workers).WithQueueing(2, 3).Build()
				return func(next http.Handler) http.Handler {
					return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						failsafehttp.NewHandlerWithExecutor(next, failsafe.With[*http.Response](l).WithContext(r.Context())).ServeHTTP(w, r)
					})
				}
			},
		},
		{
			Name: "failsafe-go v0.9.8 bulkhead 8",
			Note: "failsafehttp.NewHandler(h, bulkhead.New[*http.Response](8)): at most 8 at once, max wait 0 (its default): a request that finds it full is refused at once (429)",
			Guard: func() func(http.Handler) http.Handler {
				b := bulkhead.New[*http.Response](Workers)
				return func(next http.Handler) http.Handler { return failsafehttp.NewHandler(next, b) }
			},
		},
		{
			Name: "platinummonkey/go-concurrency-limits v0.8.0, Vegas",
			Note: "the defaults of its gRPC server interceptor, around the handler: limiter.NewDefaultLimiterWithDefaults (Vegas limit from 20, max 1000; 1 s sample windows of ≥ 100 samples) with strategy.NewSimpleStrategy(1000); over the limit, refused at once (429); an answer of 500 or more is OnDropped, else OnSuccess",
			Guard: func() func(http.Handler) http.Handler {
				l, err := limiter.NewDefaultLimiterWithDefaults("admissioncmp", strategy.NewSimpleStrategy(1000),
					limit.NoopLimitLogger{}, core.EmptyMetricRegistryInstance)
				if err != nil {
					panic(err) // constant arguments
				}
				return concurrencyLimits(l)
			},
		},
		{
			Name: "platinummonkey/go-concurrency-limits v0.8.0, Gradient2",
			Note: "limiter.NewDefaultLimiter(limit.NewGradient2Limit(initial 20, max 1000, min 1, queue size 4, smoothing 0.2, long window 600), 1 s windows of ≥ 100 samples, min RTT threshold 100 µs) with strategy.NewSimpleStrategy(1000): the defaults of NewDefaultGradient2Limit but a least limit of 1 (its default 20 is above the 8 slots); over the limit, refused at once (429)",
			Guard: func() func(http.Handler) http.Handler {
				g, err := limit.NewGradient2Limit("admissioncmp", 20, 1000, 1, func(int) int { return 4 }, 0.2, 600,
					limit.NoopLimitLogger{}, core.EmptyMetricRegistryInstance)
				if err != nil {
					panic(err) // constant arguments
				}
				l, err := limiter.NewDefaultLimiter(g, int64(time.Second), int64(time.Second), int64(100*time.Microsecond), 100,
					strategy.NewSimpleStrategy(1000), limit.NoopLimitLogger{}, core.EmptyMetricRegistryInstance)
				if err != nil {
					panic(err) // constant arguments
				}
				return concurrencyLimits(l)
			},
		},
	}
}

// StaticVariants returns deadlinekit's static limit at each of ns, with the default
// queue: the best static limit of a cell is the best of them.
func StaticVariants(ns ...int) []Variant {
	var vs []Variant
	for _, n := range ns {
		vs = append(vs, Variant{
			Name: "deadlinekit shortcircuit, static limit " + strconv.Itoa(n),
			Note: "shortcircuit.NewMiddleware(WithFloor(10 ms), WithMaxConcurrency(" + strconv.Itoa(n) + ")), default queue",
			Guard: func() func(http.Handler) http.Handler {
				return shortcircuit.NewMiddleware(shortcircuit.WithFloor(Floor), shortcircuit.WithMaxConcurrency(n))
			},
		})
	}
	return vs
}

// QueueLength is the queue of [QueueVariants]: the default, one per slot.
const QueueLength = shortcircuit.DefaultQueueFactor * Workers

// QueueVariants returns deadlinekit's static limit with each of its queue orders,
// the queue's length stated.
func QueueVariants() []Variant {
	const n = QueueLength
	var vs []Variant
	for _, o := range []shortcircuit.QueueOrder{shortcircuit.FIFO, shortcircuit.LIFO, shortcircuit.EarliestDeadline} {
		vs = append(vs, Variant{
			Name: "deadlinekit static limit 8, queue " + o.String(),
			Note: "shortcircuit.NewMiddleware(WithFloor(10 ms), WithMaxConcurrency(8), WithQueue(" + strconv.Itoa(n) + ", shortcircuit." + orderName(o) + "))",
			Guard: func() func(http.Handler) http.Handler {
				return shortcircuit.NewMiddleware(shortcircuit.WithFloor(Floor), shortcircuit.WithMaxConcurrency(Workers), shortcircuit.WithQueue(n, o))
			},
		})
	}
	return vs
}

func orderName(o shortcircuit.QueueOrder) string {
	switch o {
	case shortcircuit.LIFO:
		return "LIFO"
	case shortcircuit.EarliestDeadline:
		return "EarliestDeadline"
	}
	return "FIFO"
}

// concurrencyLimits is go-concurrency-limits' server interceptor for net/http (the
// module has none): acquire a token or refuse with 429, then release it as its
// gRPC interceptor does, OnDropped for a failure (here a 5xx answer), else OnSuccess.
func concurrencyLimits(l core.Limiter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tok, ok := l.Acquire(r.Context())
			if !ok {
				http.Error(w, "limit exceeded", http.StatusTooManyRequests)
				return
			}
			sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
			next.ServeHTTP(sw, r)
			if sw.status >= http.StatusInternalServerError {
				tok.OnDropped()
			} else {
				tok.OnSuccess()
			}
		})
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}
