package hedge

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/deadlinekit/deadlinekit/internal/record"
)

// verdict classifies the outcome of one attempt. The call ends at the first answer
// (success or answer); a failure ends it only when no other copy is left.
type verdict uint8

const (
	success  verdict = iota // an answer that is not a failure; its latency feeds the window
	answer                  // the server's verdict on the request itself (HTTP 404, gRPC NOT_FOUND): any copy would get it
	failure                 // this copy failed (5xx, a transport error, gRPC INTERNAL): another may still answer
	nonFatal                // a failure that fires the next hedge at once
	refused                 // refused for lack of budget, or not sendable: no further hedge, and a hedge's refusal is never the call's result
)

// adapter is what the core needs from a protocol's adapter: it sends the copies of
// one request and judges their outcomes.
type adapter[T any] interface {
	// prepare readies hedge n (n ≥ 1) before it counts as sent; an error means it
	// cannot be sent at all (an HTTP body that cannot be replayed).
	prepare(n int) error
	// abandon releases what prepare readied for hedge n, which will not be sent.
	abandon(n int)
	// send sends attempt n (0: the primary) under ctx, which carries the attempt's
	// span: when that span records, the request carries its trace context.
	send(ctx context.Context, n int, span record.Attempt) (T, error)
	verdict(n int, v T, err error) verdict
	// failure is the error of a failed attempt that brought v and err, for its span:
	// err, or what the answer says (an HTTP 503 comes with no error).
	failure(v T, err error) error
	// discard disposes of a result nobody will use, then calls cancel. It must not
	// block: it runs under the call's lock or on the caller's goroutine.
	discard(v T, err error, cancel context.CancelFunc)
}

// result is what one copy of a call brought back.
type result[T any] struct {
	n          int // the copy's index: 0 for the primary, 1 for the first hedge
	value      T
	err        error
	start, end time.Time
}

// call is the state of one hedged call. The primary runs on the caller's goroutine;
// hedges are sent by a timer (on the timer's goroutine) or, after a non-fatal
// failure, on a goroutine of their own. Whoever brings the call's result decides the
// call under mu: the other copies are cancelled and their spans ended, and the
// caller, blocked in the primary or waiting on decidedCh, returns the winner.
type call[T any] struct {
	callSetup[T]

	ctx   context.Context // the caller's: every copy's context is derived from it
	timer *time.Timer
	// fireFunc is c.fire as a func value, for the timer. Making it allocates, so a
	// call whose memory is reused keeps it: it stays bound to the same call.
	fireFunc func()

	mu           sync.Mutex
	decided      bool
	decidedCh    chan struct{} // made when the caller has to wait; closed when decided
	noMoreHedges bool          // a hedge was refused, or could not be sent
	capRefused   bool          // the cap refused a hedge of this call: it tries again after each delay
	copies       int           // copies given an index, the primary included
	unsent       int           // of which never sent
	outstanding  int           // of which not returned yet
	winner       result[T]     // the call's result, when hasWinner
	hasWinner    bool
	succeeded    bool      // the winner is a success
	lastFailure  result[T] // the latest failure, when hasFailure
	hasFailure   bool
	cancels      [MaxAttempts]context.CancelFunc
	spans        [MaxAttempts]record.Attempt // of the copies in flight
	started      [MaxAttempts]bool           // the copy was sent (or is being)
	returned     [MaxAttempts]bool
	// reusable: the call was decided with no hedge given an index and its timer
	// stopped before it fired (again, when its callback re-armed it: see next).
	// Nothing but the caller refers to it any more, so its memory may be reused.
	reusable bool
	// takenOver: the call took over from its primary's slot (grpcSlot), whose
	// timer's goroutine may still hold it: its memory is never reused.
	takenOver bool
}

// callSetup is what the adapter sets in a call before run.
type callSetup[T any] struct {
	hedger   *Hedger
	protocol record.Protocol
	plan     plan
	adapter  adapter[T]
	event    *Event // where the call's event is written, for the observers
}

// run sends the primary under ctx and hedges it after each delay. It returns the
// copy whose result is the call's, with the cancel function of that copy's context
// (the caller calls it once done with the result), or ok false when ctx ended while
// no copy was running on the caller's goroutine. When it returns, the primary has
// returned and every attempt span has ended; the call's span has the hedges sent and
// whether one won, or why none was sent.
func (c *call[T]) run(ctx context.Context) (winner result[T], cancel context.CancelFunc, ok bool) {
	primaryCtx, span := c.startPrimary(ctx)
	v, err := sendRecovered(primaryCtx, c.adapter, 0, span)
	// The end from the monotonic clock alone: half the price of time.Now.
	return c.finish(ctx, result[T]{n: 0, value: v, err: err, start: c.plan.start, end: c.plan.start.Add(time.Since(c.plan.start))})
}

// finish takes the primary's result r, once the primary has returned, and ends the
// call as [call.run] says.
func (c *call[T]) finish(ctx context.Context, r result[T]) (winner result[T], cancel context.CancelFunc, ok bool) {
	sent, won, skip := c.settle(ctx, r)
	winner, ok = c.winner, c.hasWinner
	if ok {
		cancel = c.cancels[winner.n]
	}
	if sent == 1 && skip == "" {
		skip = SkipNotDue
	}
	record.HedgeCall(ctx, sent-1, won, record.HedgeSkip(skip))
	c.plan.rec.Hedges(ctx, sent-1, won)
	return winner, cancel, ok
}

// kept is what a pooled call's memory keeps when it is zeroed for reuse: fireFunc,
// bound to the call, which stays where it is; and the timer, stopped before it
// fired and bound to fireFunc, when it was made outside any testing/synctest bubble
// (see [grpcCall.release]).
type kept struct {
	fire  func()
	timer *time.Timer
}

// keep returns what c's memory keeps across a reuse; restore puts it back.
func (c *call[T]) keep() kept {
	k := kept{c.fireFunc, c.timer}
	if inBubble(c.plan.start) {
		k.timer = nil
	}
	return k
}

func (c *call[T]) restore(k kept) { c.fireFunc, c.timer = k.fire, k.timer }

// startPrimary readies the primary's context and span, and arms the timer of the
// first hedge.
func (c *call[T]) startPrimary(ctx context.Context) (context.Context, record.Attempt) {
	primaryCtx, cancel := c.primaryContext(ctx)
	c.ctx, c.cancels[0], c.copies, c.outstanding = ctx, cancel, 1, 1
	primaryCtx, span := record.StartAttempt(primaryCtx, c.protocol, record.KindPrimary, 1)
	c.spans[0], c.started[0] = span, true
	if c.fireFunc == nil {
		c.fireFunc = c.fire
	}
	// Under mu: a short delay may fire before c.timer is set, and fire reads it. A
	// timer kept from an earlier call (stopped before it fired, made outside any
	// synctest bubble: see [grpcCall.release]) is armed again, outside bubbles only.
	c.mu.Lock()
	if c.timer != nil && !inBubble(c.plan.start) {
		c.timer.Reset(c.plan.delay)
	} else {
		c.timer = time.AfterFunc(c.plan.delay, c.fireFunc)
	}
	c.mu.Unlock()
	return primaryCtx, span
}

// primaryContexter is an adapter that makes its primary's context itself (the HTTP
// adapter, see [httpAttempts.primaryContext]); for the others (gRPC's) the core
// makes a cancellable child of the caller's.
type primaryContexter interface {
	primaryContext(ctx context.Context) (context.Context, context.CancelFunc)
}

// primaryContext returns the primary's context and its cancel.
func (c *call[T]) primaryContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if a, ok := c.adapter.(primaryContexter); ok {
		return a.primaryContext(ctx)
	}
	return context.WithCancel(ctx)
}

// inBubble reports whether now, read from time.Now, was read inside a
// testing/synctest bubble: the bubble's clock has no monotonic reading, which
// Round(0) would strip.
func inBubble(now time.Time) bool { return now == now.Round(0) }

// settle takes the primary's result r, waits until the call is decided ([call.await])
// and returns the copies sent, whether a hedge won and why none was sent, if so:
// under one hold of c.mu, where a call decided by its primary needs no other.
// Once it returns the call is decided: its winner and the copies' cancel functions
// are final, and may be read without c.mu.
func (c *call[T]) settle(ctx context.Context, r result[T]) (sent int, won bool, skip Skip) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.takeLocked(r)
	c.await(ctx)
	sent = c.copies - c.unsent
	c.event.Attempts = sent
	return sent, c.hedgeWon(), c.event.Skipped
}

// await returns once the call is decided, or decides it without a winner when ctx
// ends first. It is called once the primary has returned, with c.mu held, which it
// lets go of while it waits.
func (c *call[T]) await(ctx context.Context) {
	if c.decided {
		return
	}
	c.decidedCh = make(chan struct{})
	ch := c.decidedCh
	c.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
	c.mu.Lock()
	if !c.decided {
		c.endWithout()
	}
}

// fire sends the next hedge when the delay has passed (on the timer's goroutine).
func (c *call[T]) fire() {
	c.mu.Lock()
	ctx, n, ok := c.next(false)
	c.mu.Unlock()
	if ok {
		c.sendHedge(ctx, n)
	}
}

// next decides whether a hedge goes out now; when it does, it gives the hedge an
// index and a context, and arms the timer of the hedge after it. failed: a copy
// has just failed non-fatally (the hedge would replace it at once), and next runs
// off the timer's callback. c.mu is held.
func (c *call[T]) next(failed bool) (ctx context.Context, n int, ok bool) {
	limit := c.hedger.cfg.maxAttempts
	if c.decided || c.noMoreHedges || c.copies >= limit {
		return nil, 0, false
	}
	if !c.hedger.allow(c.ctx, c.event, c.capRefused) {
		if c.event.Skipped == SkipCap {
			// No token: try again after another delay. A call still out after k
			// delays has had k tries, so that a short account's tokens go to the
			// calls that stay slow more than to those that pass the delay and
			// then answer. Only the timer's own callback re-arms it: re-armed
			// elsewhere, a timer that has just fired, its callback waiting for
			// c.mu, would look stopped in time to end (see reusable).
			c.capRefused = true
			if !failed {
				c.arm(c.plan.delay)
			}
			return nil, 0, false
		}
		c.noMoreHedges = true
		return nil, 0, false
	}
	if c.capRefused {
		c.event.Skipped = "" // a later try found a token
	}
	n = c.copies
	ctx, c.cancels[n] = context.WithCancel(c.ctx)
	c.copies++
	c.outstanding++
	if c.copies < limit {
		c.arm(c.plan.delay)
	}
	return ctx, n, true
}

// arm sets the timer to fire after d. c.mu is held.
func (c *call[T]) arm(d time.Duration) {
	if c.timer == nil { // a call taken over from its primary's slot (grpcSlot)
		c.timer = time.AfterFunc(d, c.fireFunc)
	} else {
		c.timer.Reset(d)
	}
}

// sendHedge sends hedge n and hands its result over. A hedge that cannot be prepared
// is not sent (see [call.unsendable]).
func (c *call[T]) sendHedge(ctx context.Context, n int) {
	prepErr := prepareRecovered(c.adapter, n)
	c.mu.Lock()
	switch {
	case c.decided:
		// Decided before this hedge went out: end counted it unsent.
		c.returned[n] = true
		c.outstanding--
		c.mu.Unlock()
		c.adapter.abandon(n)
		return
	case prepErr != nil:
		c.unsendable(n)
		c.mu.Unlock()
		return
	}
	c.started[n] = true
	c.hedger.hedges.Add(1)
	ctx, span := record.StartAttempt(ctx, c.protocol, record.KindHedge, n+1)
	c.spans[n] = span
	if r, ok := c.adapter.(readier); ok {
		r.ready(ctx, n)
	}
	c.mu.Unlock()
	start := time.Now()
	v, err := sendRecovered(ctx, c.adapter, n, span)
	c.take(result[T]{n: n, value: v, err: err, start: start, end: time.Now()})
}

// readier is an adapter that reads what a hedge sends of the caller's request
// (the HTTP adapter: its URL and header; the gRPC adapter: its message and call
// options; the framework adapter: a copy of the framework's request, through
// [rpc.Call.Copy]) before the hedge goes out: [call.sendHedge]
// calls ready under the call's lock, while the call is undecided, so that no hedge
// reads the caller's request once the call may have returned to the caller, who
// may then change it and send it again (http.RoundTripper's contract).
type readier interface {
	// ready makes what hedge n sends under ctx, its context. It must not block.
	ready(ctx context.Context, n int)
}

// unsendable gives up hedge n, which could not be prepared: it gives its token back,
// stops further hedges, and leaves the call to the copies already out. c.mu is held.
func (c *call[T]) unsendable(n int) {
	c.returned[n] = true
	c.outstanding--
	c.unsent++
	c.hedger.tokens.refund()
	c.noMoreHedges = true
	c.event.Skipped = SkipNotIdempotent
	c.cancels[n]()
	if c.outstanding == 0 {
		c.endWithLastFailure()
	}
}

// take takes the result of a copy. Its span ends here, in the same step as the
// decision it leads to; or it has ended already, cancelled, with the call.
func (c *call[T]) take(r result[T]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.takeLocked(r)
}

// takeLocked is [call.take] with c.mu held.
func (c *call[T]) takeLocked(r result[T]) {
	c.returned[r.n] = true
	c.outstanding--
	span := c.spans[r.n]
	c.spans[r.n] = record.Attempt{}
	if c.decided {
		c.adapter.discard(r.value, r.err, c.cancels[r.n])
		return
	}
	v := c.adapter.verdict(r.n, r.value, r.err)
	endSpan(c.ctx, span, v, r.err, func() error { return c.adapter.failure(r.value, r.err) })
	switch {
	case v == success:
		c.learn(r.end, r.end.Sub(r.start))
		c.endWithSuccess(r)
	case v == answer:
		c.endWithAnswer(r)
	case v == refused && r.n > 0:
		c.refusedHedge(r)
	default:
		c.failed(r, v)
	}
}

// endSpan ends the span of a copy that brought err, judged v, under the caller's
// ctx: a success, or an answer with no error, succeeded; another copy failed
// (failure is its error), or, cut short because the caller left, was canceled.
func endSpan(ctx context.Context, span record.Attempt, v verdict, err error, failure func() error) {
	if v == success || v == answer && err == nil {
		span.End(record.OutcomeSuccess, nil)
		return
	}
	span.End(record.Cut(ctx, record.OutcomeFailure), failure())
}

// refusedHedge takes a hedge refused for lack of budget: the primary decides the
// call, and no further hedge goes out, as it would have even less time. c.mu is held.
func (c *call[T]) refusedHedge(r result[T]) {
	c.noMoreHedges = true
	c.adapter.discard(r.value, r.err, c.cancels[r.n])
	if c.outstanding == 0 {
		c.endWithLastFailure()
	}
}

// failed takes a failure, the call's result only if no other copy answers. A
// non-fatal one fires the next hedge at once; a refused primary stops further
// hedges. c.mu is held.
func (c *call[T]) failed(r result[T], v verdict) {
	if v == refused {
		c.noMoreHedges = true
	}
	if c.hasFailure {
		c.adapter.discard(c.lastFailure.value, c.lastFailure.err, c.cancels[c.lastFailure.n])
	}
	c.lastFailure, c.hasFailure = r, true
	if v == nonFatal {
		if ctx, n, ok := c.next(true); ok {
			go c.sendHedge(ctx, n)
			return
		}
	}
	if c.outstanding == 0 {
		c.endWithLastFailure()
	}
}

// learn feeds the target's window with a latency.
func (c *call[T]) learn(at time.Time, latency time.Duration) {
	if w := c.plan.window; w != nil {
		w.Add(at, latency)
	}
}

// censored is the latency a primary cut short by a hedge's success counts as, at
// least: a little above the delay it was hedged after, beyond the window's
// resolution there (its bins are 1/32 to 1/16 of their value wide). Its time up to
// the cut is a lower bound of its latency; when the hedge answered within a bin of
// the delay, that time falls in the delay's own bin, and then no latency in the
// window lies above the delay: its quantile could go down but never up, and the
// hedges would spend more than their share.
func censored(delay time.Duration) time.Duration { return delay + delay/32 + 1 }

// hedgeWon reports whether the call's result is a hedge's success. c.mu is held.
func (c *call[T]) hedgeWon() bool { return c.hasWinner && c.succeeded && c.winner.n > 0 }

// endWithSuccess decides the call with r, a success. c.mu is held, as for every
// end method.
func (c *call[T]) endWithSuccess(r result[T]) {
	c.winner, c.hasWinner, c.succeeded = r, true, true
	c.end()
}

// endWithAnswer decides the call with r, an answer that is no success.
func (c *call[T]) endWithAnswer(r result[T]) {
	c.winner, c.hasWinner = r, true
	c.end()
}

// endWithLastFailure decides the call with its last failure, if any: no copy is
// left to answer.
func (c *call[T]) endWithLastFailure() {
	if c.hasFailure {
		c.winner, c.hasWinner = c.lastFailure, true
	}
	c.end()
}

// endWithout decides the call with no result: the caller gave up.
func (c *call[T]) endWithout() { c.end() }

// end decides the call with c.winner, if any. The copies still in flight are
// cancelled, and their spans end now, cancelled: no attempt span outlives its call.
func (c *call[T]) end() {
	c.decided = true
	// A timer stopped before it fired never will: then, with no hedge given an
	// index, nothing but the caller refers to the call any more.
	c.reusable = c.timer != nil && c.timer.Stop() && c.copies == 1 && !c.takenOver
	if c.hasFailure && (!c.hasWinner || c.lastFailure.n != c.winner.n) {
		c.adapter.discard(c.lastFailure.value, c.lastFailure.err, c.cancels[c.lastFailure.n])
	}
	c.cancelInFlight()
	c.event.Winner = -1
	if c.hasWinner {
		c.event.Winner = c.winner.n
	}
	if c.hedgeWon() {
		c.hedger.wins.Add(1)
	}
	if c.decidedCh != nil {
		close(c.decidedCh)
	}
}

// cancelInFlight cancels every copy that has not returned. A copy given an index but
// never sent gives its token back; its goroutine finds the call decided. A primary
// cut short by a hedge's success feeds the window with its time so far, a lower
// bound of its latency (see censored).
func (c *call[T]) cancelInFlight() {
	for n, cancel := range c.cancels {
		if cancel == nil || c.returned[n] {
			continue
		}
		cancel()
		if !c.started[n] {
			c.unsent++
			c.hedger.tokens.refund()
			continue
		}
		c.spans[n].End(c.cutShort())
		c.spans[n] = record.Attempt{}
		if n == 0 && c.succeeded {
			now := time.Now()
			c.learn(now, max(now.Sub(c.plan.start), censored(c.plan.delay)))
		}
	}
}

// cutShort is how a copy still in flight ends when the call is decided: canceled,
// because another copy answered first, or because the caller gave up; a failure,
// timed out, when the call's deadline passed with no answer. c.mu is held.
func (c *call[T]) cutShort() (record.Outcome, error) {
	switch err := c.ctx.Err(); {
	case c.hasWinner || err == nil:
		return record.OutcomeCanceled, nil
	case record.CallerCanceled(c.ctx):
		return record.OutcomeCanceled, context.Cause(c.ctx)
	default:
		return record.OutcomeFailure, context.Cause(c.ctx)
	}
}

// sendRecovered turns a panic in an attempt (the base transport's) into an error:
// hedges run on goroutines of their own, where a panic would end the program.
func sendRecovered[T any](ctx context.Context, a adapter[T], n int, span record.Attempt) (v T, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("hedge: attempt %d panicked: %v", n, r)
		}
	}()
	return a.send(ctx, n, span)
}

// prepareRecovered is sendRecovered for prepare (an HTTP request's GetBody).
func prepareRecovered[T any](a adapter[T], n int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("hedge: preparing attempt %d panicked: %v", n, r)
		}
	}()
	return a.prepare(n)
}
