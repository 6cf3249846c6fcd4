package retry

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
)

// Defaults of the options.
const (
	defaultMaxAttempts = 3
	maxAttempts        = 5 // the most WithMaxAttempts accepts
	defaultMaxPushback = 30 * time.Second
)

// Option sets a parameter of the retry layer. Options are applied in order; the
// layer's defaults hold for everything not set.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	maxAttempts    int
	budget         *Budget
	budgetSet      bool // WithBudget was given (nil included)
	backoff        Backoff
	attemptTimeout time.Duration
	floor          time.Duration
	maxPushback    time.Duration
	classifier     func(Event) Verdict
	keys           func() string
	idempotent     map[string]bool // gRPC methods declared idempotent by option
	random         func() float64
	observers      []func(context.Context, Event)
}

func newConfig(opts []Option) *config {
	c := &config{
		maxAttempts: defaultMaxAttempts,
		backoff:     DefaultBackoff,
		floor:       deadline.DefaultFloor,
		maxPushback: defaultMaxPushback,
		random:      rand.Float64,
	}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	if !c.budgetSet {
		c.budget = NewBudget(defaultBudgetRatio, defaultBudgetMinPerSecond, defaultBudgetTTL)
	}
	return c
}

// WithMaxAttempts sets the number of attempts of a call, the first one included.
// Values are clamped to 1..5; 1 disables retrying. Default 3.
func WithMaxAttempts(n int) Option {
	return optionFunc(func(c *config) { c.maxAttempts = min(max(n, 1), maxAttempts) })
}

// WithBudget sets the retry budget the layer draws from. Share one [*Budget] between
// the transports or interceptors of one client (or of one downstream) so that they
// draw on one account. A nil budget disables budgeting: only the attempt count, the
// deadline and pushback bound the retries.
//
// Default: each [NewTransport] or [UnaryClientInterceptor] gets a budget of its own,
// NewBudget(0.1, 10, 10*time.Second).
func WithBudget(b *Budget) Option {
	return optionFunc(func(c *config) { c.budget, c.budgetSet = b, true })
}

// WithBackoff sets the backoff curve. Default [DefaultBackoff].
func WithBackoff(b Backoff) Option {
	return optionFunc(func(c *config) { c.backoff = b })
}

// WithAttemptTimeout sets the per-attempt limit: each attempt runs under
// min(d, time left) ([deadline.WithAttemptTimeout]). Zero or less (the default) means
// no per-attempt limit: an attempt may use all the time left, and a hung downstream
// leaves no room for a retry. Keep it below half of the deadlines your callers set.
func WithAttemptTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.attemptTimeout = max(d, 0) })
}

// WithFloor sets the least time worth starting an attempt with (the floor, as in
// propagate, shortcircuit and hedge): before waiting for a retry, the layer stops
// (a [*StopError], the deadline rule, or over HTTP the response) when the time left is not more than the
// wait plus d. Default [deadline.DefaultFloor] (20 ms).
func WithFloor(d time.Duration) Option {
	return optionFunc(func(c *config) { c.floor = max(d, 0) })
}

// WithMaxPushback sets the longest server pushback the layer will wait; a longer one
// stops retrying rather than coming back early to a server that asked for more time.
// Default 30 s.
//
// A server's pushback (HTTP Retry-After, delta-seconds or a date; gRPC's
// grpc-retry-pushback-ms trailer, or google.rpc.RetryInfo) replaces the backoff for
// that wait, and is never waited past the deadline: one that does not fit stops under
// the deadline rule ([WithFloor]). One of zero (a Retry-After date in the past) waits
// the backoff, jitter included, so that the clients a server pushed back do not all
// return at once. A negative or malformed one means "do not retry".
func WithMaxPushback(d time.Duration) Option {
	return optionFunc(func(c *config) { c.maxPushback = max(d, 0) })
}

// WithClassifier lets f judge every attempt that reached the downstream or failed on
// its way. An attempt that a layer beneath refused before sending is the layer's to
// judge: for lack of budget (package propagate's floor, a [*deadline.BudgetError]) it
// is not retried, spends no token, and is returned as is; with a time to come back
// (package breaker's open circuit, which gives one only to as many calls as it has
// probes) it spends no token either, and is retried after that time, when that fits
// before the deadline.
//
// f gets the attempt as an [Event] whose Verdict and Reason are the layer's own
// judgement; returning e.Verdict keeps it. Err tells the protocol's outcome apart:
// a [*StatusError] for an HTTP failure status, a gRPC status error
// ([google.golang.org/grpc/status.FromError]), a transport error. A verdict of
// Retryable is still weighed by the rest of the layer (attempts, deadline, budget, a
// server's "do not retry"). f runs on the caller's goroutine; a panic in it goes
// through the layer to the caller, once the answer nobody gets is closed. Default: the layer's own judgement, as documented on
// [NewTransport] and [UnaryClientInterceptor].
func WithClassifier(f func(e Event) Verdict) Option {
	return optionFunc(func(c *config) { c.classifier = f })
}

// WithIdempotentMethods declares gRPC methods ("/pkg.Service/Method") idempotent for
// [UnaryClientInterceptor], in addition to those whose descriptor in the protobuf
// registry says idempotency_level NO_SIDE_EFFECTS or IDEMPOTENT. Only an idempotent
// method, or a call carrying an idempotency-key, is retried after a per-attempt
// timeout: the attempt may have run. Default: none beyond the descriptors.
func WithIdempotentMethods(methods ...string) Option {
	return optionFunc(func(c *config) {
		if c.idempotent == nil {
			c.idempotent = map[string]bool{}
		}
		for _, m := range methods {
			c.idempotent[m] = true
		}
	})
}

// WithIdempotencyKeys makes the layer give every call that carries no idempotency key
// one, generated once before the first attempt and sent unchanged on every attempt
// (HTTP header Idempotency-Key, gRPC metadata idempotency-key). gen generates the key;
// nil means a random UUID (version 4, from crypto/rand). gen runs on the caller's
// goroutine; a panic in it goes through the layer to the caller. A key the caller
// set is kept and sent, with or without this option (but for a handler's forwarded
// inbound key: see below); a blank one (empty or white space) is no key, and is
// replaced.
//
// On HTTP, keys are generated for methods that are not idempotent (POST, PATCH, …);
// safe and idempotent methods need none. On gRPC, for every call. A key makes a
// request that is not idempotent retryable after it was sent: the server is expected
// to store the first result under the key and answer repeats with it.
//
// Keys travel, with or without this option: while a handler serves a keyed request
// under package dedup, each of its calls that is not idempotent (over HTTP its
// method, over gRPC and connect its declaration) and carries no key of the caller's
// gets the next key derived from the request's key, the same on a re-run of the
// handler, so that a re-run after a crash meets the downstream's stored answer
// (this assumes the handler makes the same writes in the same order on every run).
// This option is needed only for calls outside such a run, and for the idempotent
// gRPC calls within one (which get gen's keys). A key the caller set that is the
// request's own (forwarded) is replaced by a derived one. The server's
// dedup.WithoutKeyDerivation turns derivation off for the requests it serves. See
// "Keys travel" in package dedup.
func WithIdempotencyKeys(gen func() string) Option {
	return optionFunc(func(c *config) {
		if gen == nil {
			gen = newIdempotencyKey
		}
		c.keys = gen
	})
}

// withRandom sets the source of the jitter: a function returning a number in [0, 1),
// safe for concurrent use (tests pass a seeded source, to get a reproducible backoff
// sequence). Default: math/rand/v2's Float64. A nil function restores the default. f
// runs on the caller's goroutine: its panic is the caller's.
func withRandom(f func() float64) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			f = rand.Float64
		}
		c.random = f
	})
}

// WithObserver adds f to the functions called after every attempt of every call with
// what happened and what the layer does next (see [Event]). Given several times, each
// f is called, in the order given. An observer is called synchronously, on the
// caller's goroutine, and must not block; a panic in it goes through the layer to the
// caller. Unset (the default), observation costs nothing. The layer's own tracing
// (the attributes package otelattr names) does not go through observers: it records
// every attempt whether or not one is set.
func WithObserver(f func(ctx context.Context, e Event)) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.observers = append(c.observers, f)
		}
	})
}
