package dedup

import (
	"context"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
)

// Defaults of the options.
const (
	// DefaultRetention is how long a completed answer is kept: a client's retry
	// window is commonly 24 h (the payment APIs keep keys that long).
	DefaultRetention = 24 * time.Hour
	// DefaultMaxResponseSize bounds a stored answer's body (gRPC: its message).
	DefaultMaxResponseSize = 1 << 20
	// DefaultMaxRequestSize bounds the body of a keyed HTTP request, which is read
	// in full to fingerprint it before the handler runs.
	DefaultMaxRequestSize = 1 << 20
	// DefaultLeaseMargin is what a lease holds beyond its request's deadline. It is
	// there for two things. An answer completed just after the deadline must still
	// be stored: a handler notices its deadline and returns within milliseconds,
	// and its completion is one store round trip. And the lease's end must not come
	// before the deadline on any replica's clock: a store that compares an expiry
	// written with one machine's clock against another's (the SQL table of [Store]
	// with the replicas' now) is off by their skew, which NTP keeps to a few
	// milliseconds on a LAN and well under 100 ms across sites. (Redis and the
	// memory store count a TTL on their own clock: no skew.) 250 ms covers both
	// with room. A longer margin is paid by every key whose first died with its
	// replica: its repeats are refused until the lease ends, and a margin of the
	// order of the callers' budgets (it was 1 s) outlasts callers who could have
	// come back in time.
	DefaultLeaseMargin = 250 * time.Millisecond
	// DefaultStoreRetryAfter is the pushback of a 503 / Unavailable for a store that
	// cannot be reached.
	DefaultStoreRetryAfter = time.Second
	// MinRefusalReserve is the least time a repeat waiting for the first request
	// keeps for its 409 / Aborted, whatever its floor ([WithFloor]): the refusal is
	// written, goes out through the server's layers and crosses a hop back to its
	// caller, which a loaded server does in a few milliseconds. A refusal sent with
	// less arrives after the caller's deadline, and the caller's user gets a 504
	// without the come-back the refusal exists to give (the root stack's floor is
	// 1 ms: with it alone, 1 in 6 to 2 in 10 waiting repeats of a loaded payments
	// service were 504s).
	MinRefusalReserve = 10 * time.Millisecond
)

// Option configures [NewMiddleware] and [UnaryServerInterceptor].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	retention       time.Duration
	scope           func(context.Context) string
	maxResponse     int
	maxRequest      int64
	margin          time.Duration
	floor           time.Duration
	defaultBudget   time.Duration
	storeRetryAfter time.Duration
	storeWait       time.Duration
	runWithoutStore bool
	noDerive        bool // WithoutKeyDerivation
}

func newConfig(opts []Option) config {
	c := config{
		retention:       DefaultRetention,
		maxResponse:     DefaultMaxResponseSize,
		maxRequest:      DefaultMaxRequestSize,
		margin:          DefaultLeaseMargin,
		floor:           deadline.DefaultFloor,
		defaultBudget:   deadline.DefaultBudget,
		storeRetryAfter: DefaultStoreRetryAfter,
		storeWait:       DefaultStoreWait,
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

// WithRetention sets how long a completed answer is kept, at least as long as the
// clients' retry window. Default [DefaultRetention] (24 h); zero or less keeps the
// default.
func WithRetention(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.retention = d
		}
	})
}

// WithScope sets whose keys a request's key belongs to, from its context: a tenant,
// an account. Keys of different scopes never meet, so one scope never receives
// another's stored answer. This is a security boundary: take the scope from the
// authenticated principal, not from anything the caller merely claims. f is called
// once per keyed request and must be fast and safe for concurrent use. Default (nil):
// every request shares one scope.
func WithScope(f func(ctx context.Context) string) Option {
	return optionFunc(func(c *config) { c.scope = f })
}

// WithMaxResponseSize bounds an answer that is stored: over HTTP its status,
// headers, body and trailers as stored (gRPC: the marshalled message, the header and
// trailer metadata and the marshalled status). A larger answer reaches the first caller in full, but is not
// stored: its key is marked completed-but-not-kept and a repeat gets 410 Gone (gRPC
// AlreadyExists), never a second execution. Default [DefaultMaxResponseSize] (1 MiB);
// zero or less keeps the default.
func WithMaxResponseSize(n int) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.maxResponse = n
		}
	})
}

// WithMaxRequestSize bounds the body of a keyed HTTP request, which is read in full
// (and held in memory) to fingerprint it before the handler runs; a larger one is
// refused with 413 and the handler does not run. Requests without a key are not
// read. Default [DefaultMaxRequestSize] (1 MiB); zero or less keeps the default.
func WithMaxRequestSize(n int64) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.maxRequest = n
		}
	})
}

// WithLeaseMargin sets how long a running request's lease outlives its deadline:
// longer than the clocks of the replicas and the store can differ, and than a
// handler takes to return and store its answer after its deadline. Every replica
// sharing a store should use the same: a repeat's come-back is the first's lease
// less its own margin. Default [DefaultLeaseMargin] (250 ms); negative counts as
// zero.
func WithLeaseMargin(d time.Duration) Option {
	return optionFunc(func(c *config) { c.margin = max(d, 0) })
}

// WithFloor sets the time a waiting repeat keeps for itself: it waits for the
// first's answer until its own deadline less d, then answers 409 / Aborted. A d
// below [MinRefusalReserve] (10 ms) keeps that instead, so that the refusal reaches
// the caller within its budget. Default [deadline.DefaultFloor] (20 ms), the floor
// of the other layers.
func WithFloor(d time.Duration) Option {
	return optionFunc(func(c *config) { c.floor = max(d, 0) })
}

// WithDefaultTimeout sets how long the lease of a request without a deadline holds
// (plus the margin). Default [deadline.DefaultBudget] (30 s), the budget package
// propagate gives such a request; zero or less keeps the default.
func WithDefaultTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.defaultBudget = d
		}
	})
}

// WithStoreRetryAfter sets the pushback sent with the 503 / Unavailable that answers
// a keyed request while the store cannot be reached, when the store's error does
// not say when it will try again ([UnavailableError.RetryIn] does); either is capped
// at the request's time left. Default [DefaultStoreRetryAfter] (1 s).
func WithStoreRetryAfter(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.storeRetryAfter = d
		}
	})
}

// DefaultStoreWait is how long a keyed request waits, at most, for a store that
// cannot be reached to come back before its 503 / Unavailable: see [WithStoreWait].
const DefaultStoreWait = 3 * time.Second

// WithStoreWait sets how long a keyed request waits for a store that cannot be
// reached, and says when it tries its backend again ([UnavailableError.RetryIn]:
// redisstore's probe after a failure), before its 503 / Unavailable. The request
// tries the store again at each of those times while its own budget, less the
// floor (at least [MinRefusalReserve], its refusal's way back), can pay for the
// wait; then, or after d in all, it gets its 503 with the store's come-back, which
// its caller honours only if it has the time. A store outage shorter than the
// request's budget so costs latency, not a refusal that its caller, with the same
// store behind every replica, could not have answered any sooner. The request
// holds its guard's slot meanwhile. Zero: never wait, a prompt 503. Default
// [DefaultStoreWait] (3 s).
func WithStoreWait(d time.Duration) Option {
	return optionFunc(func(c *config) { c.storeWait = max(d, 0) })
}

// WithRunWithoutStore makes a keyed request run its handler, without
// deduplication, while the store cannot be reached, instead of answering 503 /
// Unavailable. A repeat may then run twice: choose it only for handlers where that
// is better than refusing. Default: off.
func WithRunWithoutStore() Option {
	return optionFunc(func(c *config) { c.runWithoutStore = true })
}
