package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deadlinekit/deadlinekit/dedup"
)

// DefaultTimeout bounds each call of the store to Redis (see [WithTimeout]).
const DefaultTimeout = 250 * time.Millisecond

// WithTimeout bounds each call of the store to Redis (one round trip, with
// whatever the client does inside it: dials, retries, waits for a connection of its
// pool) by d, and never past the request's deadline (the context's), whatever the
// client's options. go-redis retries a failed command (MaxRetries, 3 by default)
// with a backoff, and without ContextTimeoutEnabled a read from a Redis that stopped
// answering ignores the context's deadline and waits for ReadTimeout (3 s): so the
// store does not wait for the client. It runs the call on its own goroutine, and
// answers [dedup.ErrUnavailable] at the bound; the abandoned call goes on until the
// client gives up, and its result is discarded (at most 1024 such calls at once:
// beyond, calls fail at once; [Store.Close] waits for them).
//
// A call that fails, or reaches d while no other call to its Redis succeeded, marks
// that Redis (a Cluster: the key's master) down: see [FirstPause]. Completions and releases are bounded too, but never refused for
// a Redis marked down: an answer that is not stored runs its key again once the
// lease ends, so each is tried, and one abandoned at the bound goes on until the
// lease ends. With [WithReplicaWait], the bound of a write is d plus the
// replica wait's timeout. Default [DefaultTimeout] (250 ms); zero or less keeps the
// default.
func WithTimeout(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.timeout = d
		}
	}
}

// maxAbandoned bounds the calls abandoned at their bound that still run.
const maxAbandoned = 1024

var (
	errTimedOut         = errors.New("redisstore: Redis did not answer within the store's timeout")
	errTooManyAbandoned = errors.New("redisstore: too many calls to Redis still blocked")
	// ErrClosed is what a call to a closed [Store] fails with (as a
	// [dedup.UnavailableError]).
	ErrClosed = errors.New("redisstore: the store is closed")
)

// calls is the state of the store's bounded calls.
type calls struct {
	timeout   time.Duration
	mu        sync.RWMutex // held for reading while a call starts; Close takes it to close
	closed    bool
	running   sync.WaitGroup
	abandoned atomic.Int64
	// stale holds name + "\n" + token for each Acquire abandoned at its bound whose
	// give-back has not returned: a lease Redis may hold that no request runs under.
	stale   sync.Map
	single  health   // a client that is not a Cluster
	slots   health   // a Cluster's first lookup of its slot map
	masters sync.Map // a Cluster's master address → *health
	loaded  atomic.Bool
}

// Close makes every later call fail with [ErrClosed], and returns once every call
// the store abandoned at its bound has returned from the client: at once when the
// client was closed first (its calls then fail), else when the client gives up on
// its own timeouts. It does not close the client, which is the caller's.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.running.Wait()
	return nil
}

// healthOf returns the health of the Redis that holds name.
func (s *Store) healthOf(ctx context.Context, name string) (*health, error) {
	if s.cluster == nil {
		return &s.single, nil
	}
	var addr string
	var reach func(context.Context) error
	lookup := func(ctx context.Context) error {
		m, err := s.cluster.MasterForKey(ctx, name)
		if err == nil {
			addr = m.Options().Addr
			if _, known := s.masters.Load(addr); !known {
				reach = reachOf(m)
			}
		}
		return err
	}
	if s.loaded.Load() {
		// The slot map is loaded, and go-redis keeps one from then on: the lookup
		// reads memory.
		if err := lookup(ctx); err != nil {
			return nil, err
		}
	} else {
		// The first lookup loads the slot map over the network: bounded.
		if err := s.bounded(ctx, &s.slots, s.timeout, lookup, callOpts{}); err != nil {
			return nil, err
		}
		s.loaded.Store(true)
	}
	h, ok := s.masters.Load(addr)
	if !ok {
		h, _ = s.masters.LoadOrStore(addr, &health{reach: reach})
	}
	return h.(*health), nil
}

// callOpts says what happens to a call its caller abandoned.
type callOpts struct {
	// finish: a completion or a release. It goes to Redis even while Redis is
	// down (it does not fail fast: an answer not stored runs its key again once the
	// lease ends), and keeps its context (the lease's end) when abandoned, so that
	// it may still land before the lease ends; other calls end at the bound.
	finish bool
	// undo runs, on the abandoned call's goroutine, once it returned: Redis may
	// have run it (an Acquire's lease, taken for a request that got a 503 and
	// runs no handler, is given back).
	undo func(ctx context.Context)
	// stale, when not empty, is what the call adds to calls.stale from when it
	// is abandoned until its undo returned.
	stale string
}

// do runs f, a call to the Redis that holds name, within the store's bound and the
// request's deadline, unless that Redis is down.
func (s *Store) do(ctx context.Context, name string, f func(context.Context) error, o callOpts) error {
	h, err := s.healthOf(ctx, name)
	if err != nil {
		return s.failed(ctx, err)
	}
	bound := s.timeout
	if s.replicas > 0 {
		bound += s.waitFor
	}
	return s.failed(ctx, s.bounded(ctx, h, bound, f, o))
}

// call states, for the handover between a call's goroutine and its caller.
const (
	callRunning int32 = iota
	callReturned
	callAbandoned
)

// bounded runs f on its own goroutine with a context that ends after bound
// (whatever the request's: a call abandoned at the request's deadline goes on to
// its bound, so that it still tells h whether Redis answers; a finishing call, to
// its context's deadline if later), and returns its error, or a
// [dedup.UnavailableError] when bound passes first (or the request's context ends
// first: its error), or when h says that Redis is down.
func (s *Store) bounded(ctx context.Context, h *health, bound time.Duration, f func(context.Context) error, o callOpts) error {
	probe, err := s.enter(h, o)
	if err != nil {
		return err
	}
	if h.reach != nil && (probe || o.finish && h.down.Load()) {
		f = h.reaching(f)
	}
	c := &boundedCall{s: s, h: h, probe: probe, stale: o.stale, start: time.Now(), done: make(chan error, 1)}
	// bctx ends at the bound: the caller waits no longer, and Redis is down,
	// whenever the client returns. The call's own context may end later.
	bctx, bcancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	end := time.Now().Add(bound)
	if d, ok := ctx.Deadline(); ok && o.finish && d.After(end) {
		end = d
	}
	cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), end)
	stop := context.AfterFunc(bctx, func() { c.settle(h.timedOut(c.start)) })
	go func() {
		defer s.running.Done()
		defer cancel()
		defer bcancel() // after the handover: bctx ending early would read as the bound
		c.run(cctx, f, o, bound, stop)
	}()
	return c.wait(ctx, bctx)
}

// enter admits a call to h's Redis: it fails fast while h is down (a finishing
// call goes anyway), once the store is closed, or with too many calls abandoned;
// probe says the call is h's probe. An admitted call counts in s.running.
func (s *Store) enter(h *health, o callOpts) (probe bool, err error) {
	probe, retryIn, ok := false, time.Duration(0), true
	if !o.finish {
		probe, retryIn, ok = h.admit(time.Now())
	}
	if !ok {
		return false, &dedup.UnavailableError{RetryIn: retryIn}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		h.done(probe, neutral, time.Now())
		return false, &dedup.UnavailableError{Err: ErrClosed}
	}
	if s.abandoned.Load() >= maxAbandoned {
		h.done(probe, neutral, time.Now())
		return false, &dedup.UnavailableError{RetryIn: FirstPause, Err: errTooManyAbandoned}
	}
	s.running.Add(1)
	return probe, nil
}

// boundedCall is one call of [Store.bounded]: its goroutine and its caller hand
// it over through state (running, then returned or abandoned), and the first of
// its answer and its bound tells h what became of it.
type boundedCall struct {
	s       *Store
	h       *health
	probe   bool
	stale   string
	start   time.Time
	settled atomic.Bool
	state   atomic.Int32
	done    chan error
}

// settle tells h the call's outcome, once.
func (c *boundedCall) settle(o outcome) {
	if c.settled.CompareAndSwap(false, true) {
		c.h.done(c.probe, o, time.Now())
	}
}

// run is the call's goroutine: f, then, if its caller abandoned it meanwhile,
// o.undo (what Redis may have done for a caller that got a 503), detached from the
// caller, within bound.
func (c *boundedCall) run(cctx context.Context, f func(context.Context) error, o callOpts, bound time.Duration, stop func() bool) {
	err := f(cctx)
	if stop() {
		c.settle(judge(err))
	}
	if !c.state.CompareAndSwap(callRunning, callReturned) {
		if o.undo != nil {
			//deadlinevet:detached the caller left at the bound; giving its lease back must outlive it
			uctx, ucancel := context.WithTimeout(context.WithoutCancel(cctx), bound)
			o.undo(uctx)
			ucancel()
		}
		if o.stale != "" {
			c.s.stale.Delete(o.stale)
		}
		c.s.abandoned.Add(-1)
	}
	c.done <- err
}

// wait returns the call's error, or abandons it when bctx (the bound) or ctx (the
// request) ends first.
func (c *boundedCall) wait(ctx, bctx context.Context) error {
	var cause error
	select {
	case err := <-c.done:
		return c.s.result(c.h, err)
	case <-bctx.Done():
		cause = errTimedOut
	case <-ctx.Done():
		cause = ctx.Err()
	}
	if c.stale != "" {
		c.s.stale.Store(c.stale, struct{}{}) // before the handover: its undo deletes it
	}
	if !c.state.CompareAndSwap(callRunning, callAbandoned) {
		if c.stale != "" {
			c.s.stale.Delete(c.stale)
		}
		return c.s.result(c.h, <-c.done) // it returned meanwhile
	}
	c.s.abandoned.Add(1)
	if cause == errTimedOut {
		c.settle(c.h.timedOut(c.start))
		return &dedup.UnavailableError{RetryIn: c.h.retryIn(time.Now()), Err: cause}
	}
	return &dedup.UnavailableError{Err: cause}
}

// result is the error of a call that returned err.
func (s *Store) result(h *health, err error) error {
	if err == nil || judge(err) == succeeded {
		return err
	}
	return &dedup.UnavailableError{RetryIn: h.retryIn(time.Now()), Err: err}
}

// judge reads a call's error: Redis refused the connection of the call's reach
// check, or it answered (an error reply too: LOADING or
// CLUSTERDOWN come from a node that is up, and each request meets them at once;
// marking a live master down for a failover elsewhere would refuse its keys after
// the failover ended), or it failed.
func judge(err error) outcome {
	if err == nil || errors.Is(err, redis.Nil) {
		return succeeded
	}
	var refusedErr *errRefused
	if errors.As(err, &refusedErr) {
		return refused
	}
	var re redis.Error
	if errors.As(err, &re) {
		return succeeded
	}
	return failedCall
}
