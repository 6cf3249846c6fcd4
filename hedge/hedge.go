package hedge

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/quantile"
	"github.com/deadlinekit/deadlinekit/otelattr"
)

// Hedger holds the state of a hedging layer: the latency window of each target, the
// token account that caps hedges, and the statistics. Its methods and the adapters
// it makes are safe for concurrent use. Make one with [New]; the zero Hedger is not
// usable. It starts no goroutine of its own: every goroutine it uses belongs to a
// call and ends with it (a loser's, at most 100 ms after, while its body drains).
type Hedger struct {
	cfg       *config
	qcfg      quantile.Config
	targets   atomic.Pointer[map[string]*target] // copy-on-write, at most MaxTargets
	targetsMu sync.Mutex
	tokens    *tokens

	primaries, hedges, wins, refusedCap, refusedDeadline atomic.Uint64
	notIdempotent, notReplayable                         atomic.Uint64
}

// target is what a Hedger knows of one target: a host (HTTP) or a full method
// (gRPC). One lookup per call finds it.
type target struct {
	// idempotent: the gRPC method is declared idempotent, by option or in its
	// descriptor.
	idempotent bool
	w          atomic.Pointer[quantile.Window] // made by the first hedgeable call
}

// New returns a Hedger configured by opts. The adapters it makes
// ([Hedger.Transport], [Hedger.UnaryClientInterceptor]) share its delay estimates,
// its token account and its statistics.
func New(opts ...Option) *Hedger {
	c := newConfig(opts)
	return &Hedger{
		cfg:    c,
		qcfg:   quantile.Config{Length: c.window, Buckets: c.buckets, Quantile: c.percentile},
		tokens: newTokens(c.maxExtraLoad),
	}
}

// Stats is a snapshot of a [Hedger]'s counters, each counted since it was made.
type Stats struct {
	// Primaries is the number of calls that could be hedged: idempotent (and
	// replayable) calls, each sent once as a primary.
	Primaries uint64
	// Hedges is the number of hedges sent. A hedge whose body could not be replayed
	// was not sent, and is not counted; one refused by a layer beneath (propagate's
	// floor) or by the server is.
	Hedges uint64
	// HedgeWins is the number of calls whose result is a hedge's success (an HTTP
	// status below 400, gRPC OK) rather than the primary's. A call whose copies all
	// failed is no win, whichever failure it returned.
	HedgeWins uint64
	// RefusedByCap is the number of hedges not sent because the token account was
	// empty ([WithMaxExtraLoad]).
	RefusedByCap uint64
	// RefusedByDeadline is the number of hedges not sent because less than the floor
	// was left before the call's deadline ([WithFloor]).
	RefusedByDeadline uint64
	// NotIdempotent is the number of calls sent once because they are not
	// idempotent (HTTP POST or PATCH without Idempotency-Key, gRPC methods not
	// declared idempotent).
	NotIdempotent uint64
	// NotReplayable is the number of idempotent HTTP calls sent once because their
	// body cannot be replayed (no GetBody), and of gRPC calls whose reply is not a
	// proto.Message.
	NotReplayable uint64
	// Tokens is the balance of the token account: how many hedges may go out now.
	Tokens float64
}

// Stats returns the current counters.
func (h *Hedger) Stats() Stats {
	return Stats{
		Primaries:         h.primaries.Load(),
		Hedges:            h.hedges.Load(),
		HedgeWins:         h.wins.Load(),
		RefusedByCap:      h.refusedCap.Load(),
		RefusedByDeadline: h.refusedDeadline.Load(),
		NotIdempotent:     h.notIdempotent.Load(),
		NotReplayable:     h.notReplayable.Load(),
		Tokens:            h.tokens.value(),
	}
}

// Delay returns the current hedge delay of target (a host, "example.com:443", for
// HTTP; a full method, "/pkg.Service/Method", for gRPC), and false when calls to it
// are not hedged yet: too few latencies in its window and no [WithInitialDelay].
func (h *Hedger) Delay(target string) (time.Duration, bool) {
	if m := h.targets.Load(); m != nil {
		if t, ok := (*m)[target]; ok {
			return h.delay(t.w.Load(), time.Now())
		}
	}
	return h.delay(nil, time.Now())
}

// Delays returns the current hedge delay of every target seen, leaving out those not
// hedged yet.
func (h *Hedger) Delays() map[string]time.Duration {
	out := map[string]time.Duration{}
	m := h.targets.Load()
	if m == nil {
		return out
	}
	now := time.Now()
	for name, t := range *m {
		if w := t.w.Load(); w != nil {
			if d, ok := h.delay(w, now); ok {
				out[name] = d
			}
		}
	}
	return out
}

// target returns what h knows of the target name, making it when it is new; nil
// when MaxTargets targets are known already. method says name is a gRPC method,
// whose idempotency is looked up once.
func (h *Hedger) target(name string, method bool) *target {
	if m := h.targets.Load(); m != nil {
		if t, ok := (*m)[name]; ok {
			return t
		}
	}
	h.targetsMu.Lock()
	defer h.targetsMu.Unlock()
	old := h.targets.Load()
	n := 0
	if old != nil {
		if t, ok := (*old)[name]; ok {
			return t
		}
		n = len(*old)
	}
	if n >= MaxTargets {
		return nil
	}
	t := &target{}
	if method {
		t.idempotent = h.declaredIdempotent(name)
	}
	m := make(map[string]*target, n+1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[name] = t
	h.targets.Store(&m)
	return t
}

// window returns the latency window of t, making it on first use; nil for a nil t.
func (h *Hedger) window(t *target) *quantile.Window {
	if t == nil {
		return nil
	}
	if w := t.w.Load(); w != nil {
		return w
	}
	t.w.CompareAndSwap(nil, quantile.New(h.qcfg))
	return t.w.Load()
}

// delay returns the hedge delay from window w, or false when calls are not hedged.
func (h *Hedger) delay(w *quantile.Window, now time.Time) (time.Duration, bool) {
	var d time.Duration
	n := 0
	if w != nil {
		d, n = w.Tracked(now)
	}
	if n < h.cfg.minSamples {
		if h.cfg.initialDelay <= 0 {
			return 0, false
		}
		d = h.cfg.initialDelay
	}
	d = max(d, h.cfg.minDelay)
	if h.cfg.maxDelay > 0 {
		d = min(d, h.cfg.maxDelay)
	}
	return d, true
}

// Event describes one call, for an observer ([WithObserver]).
type Event struct {
	// Target is the host (HTTP) or full method (gRPC) of the call.
	Target string
	// Attempts is the number of copies of the call sent: 1 when it was not hedged. A
	// hedge that could not be sent (its body could not be replayed) is not counted.
	Attempts int
	// Winner is the index of the attempt whose answer (or failure) was returned: 0
	// for the primary, 1 for the first hedge; -1 when none was (the caller gave up).
	Winner int
	// Delay is the hedge delay the call was given; zero when it could not be hedged.
	Delay time.Duration
	// Skipped says why a hedge that was due was not sent, or why the call could not
	// be hedged at all; SkipNone when nothing was held back.
	Skipped Skip
}

// Skip is the reason a hedge was not sent.
type Skip uint8

// Reasons for not hedging.
const (
	SkipNone          Skip = iota
	SkipNotIdempotent      // the call is not idempotent
	SkipNotReplayable      // the HTTP body cannot be replayed (no GetBody, or GetBody failed)
	SkipWarmingUp          // too few latencies known for the target, no initial delay
	SkipCap                // the token account was empty
	SkipDeadline           // less than the floor was left
	SkipDisabled           // hedging is configured off ([WithMaxAttempts] 1, [WithMaxExtraLoad] 0)
)

func (s Skip) String() string {
	switch s {
	case SkipNone:
		return "none"
	case SkipNotIdempotent:
		return "not idempotent"
	case SkipNotReplayable:
		return "body not replayable"
	case SkipWarmingUp:
		return "warming up"
	case SkipCap:
		return "extra-load cap"
	case SkipDeadline:
		return "deadline"
	case SkipDisabled:
		return "disabled"
	}
	return fmt.Sprintf("Skip(%d)", uint8(s))
}

// otel is the reason recorded on the call's span for a call that sent no hedge;
// SkipNone there means the call ended before its hedge was due.
func (s Skip) otel() otelattr.HedgeSkip {
	switch s {
	case SkipNotIdempotent, SkipNotReplayable:
		return otelattr.HedgeSkipNotIdempotent
	case SkipWarmingUp:
		return otelattr.HedgeSkipWarmingUp
	case SkipCap:
		return otelattr.HedgeSkipCap
	case SkipDeadline:
		return otelattr.HedgeSkipDeadline
	case SkipDisabled:
		return otelattr.HedgeSkipDisabled
	}
	return otelattr.HedgeSkipNotDue
}

// observe calls the observers with e, in order, on the caller's goroutine.
func (h *Hedger) observe(ctx context.Context, e *Event) {
	for _, f := range h.cfg.observers {
		f(ctx, *e)
	}
}

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

// protocol is what the core needs from an adapter.
type protocol[T any] interface {
	// prepare readies hedge n (n ≥ 1) before it counts as sent; an error means it
	// cannot be sent at all (an HTTP body that cannot be replayed).
	prepare(n int) error
	// abandon releases what prepare readied for hedge n, which will not be sent.
	abandon(n int)
	// send sends attempt n (0: the primary) under ctx; traced says ctx carries a
	// recording attempt span, whose trace context the request should carry.
	send(ctx context.Context, n int, traced bool) (T, error)
	verdict(n int, v T, err error) verdict
	// discard disposes of a result nobody will use, then calls cancel. It must not
	// block: it runs under the call's lock or on the caller's goroutine.
	discard(v T, err error, cancel context.CancelFunc)
}

// attempt is the result of one copy of a call.
type attempt[T any] struct {
	n          int
	v          T
	err        error
	start, end time.Time
}

// call is the state of one hedged call. The primary runs on the caller's goroutine;
// hedges are sent by a timer (on the timer's goroutine) or, after a non-fatal
// failure, on a goroutine of their own. Whoever brings the call's result ends the
// call under mu: the other attempts are cancelled and their spans ended, and the
// caller, blocked in the primary or waiting on doneCh, returns the winner.
type call[T any] struct {
	h     *Hedger
	ctx   context.Context
	proto otelattr.Protocol
	w     *quantile.Window
	p     protocol[T]
	delay time.Duration
	timer *time.Timer
	// fireFn is c.fire as a func value, kept when the call's memory is reused
	// (one allocation less per call).
	fireFn func()

	mu       sync.Mutex
	ev       *Event
	done     bool
	stopped  bool // a hedge was refused, or could not be sent: no more for this call
	sent     int  // copies given an index, the primary included
	unsent   int  // of which never sent
	pending  int
	winner   attempt[T]
	has      bool       // winner holds the call's result
	hedgeWon bool       // ... and it is a hedge's success
	last     attempt[T] // the latest failure, when hasLast
	hasLast  bool
	cancels  [MaxAttempts]context.CancelFunc
	spans    [MaxAttempts]otelattr.Attempt // of the attempts in flight
	started  [MaxAttempts]bool             // the attempt was sent (or is being)
	returned [MaxAttempts]bool
	start0   time.Time
	doneCh   chan struct{} // made when the caller has to wait; closed when done
	// quiet: the call ended with no hedge sent and its wake-up never taken: nothing
	// but the caller refers to it any more, so its memory may be reused.
	quiet bool
}

// hedged runs a call that may be hedged after delay; c is a zero call, allocated by
// the adapter along with what else the call needs. It returns the attempt whose
// result is the call's, with the cancel function of that attempt's context (the
// caller calls it once done with the result), or ok false when ctx ended while no
// attempt was running on the caller's goroutine. When it returns, the primary has
// returned, and every attempt span has ended.
//
// Every attempt gets an attempt span (package otelattr) when the call's span is
// recording, ended with its outcome, or cancelled when the call ends first; the call
// gets the hedges sent and whether one won, or why none was sent.
func hedged[T any](c *call[T], h *Hedger, ctx context.Context, proto otelattr.Protocol, w *quantile.Window, p protocol[T], start time.Time, delay time.Duration, ev *Event) (a attempt[T], cancel context.CancelFunc, ok bool) {
	c.h, c.ctx, c.proto, c.w, c.p, c.delay, c.ev, c.sent, c.pending = h, ctx, proto, w, p, delay, ev, 1, 1
	ctx0, cancel0 := context.WithCancel(ctx)
	c.cancels[0] = cancel0
	c.start0 = start
	actx, span := otelattr.StartAttempt(ctx0, proto, otelattr.KindPrimary, 1)
	c.spans[0], c.started[0] = span, true
	c.mu.Lock()
	if c.fireFn == nil {
		c.fireFn = c.fire
	}
	c.timer = time.AfterFunc(delay, c.fireFn)
	c.mu.Unlock()

	v, err := safeSend(p, actx, 0, span.Recording())
	c.result(attempt[T]{n: 0, v: v, err: err, start: c.start0, end: time.Now()})

	c.mu.Lock()
	if !c.done {
		c.doneCh = make(chan struct{})
		ch := c.doneCh
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		c.mu.Lock()
		if !c.done {
			c.finish(attempt[T]{}, false, false)
		}
	}
	sent := c.sent - c.unsent
	c.ev.Attempts = sent
	ok, winner, won, skip := c.has, c.winner, c.hedgeWon, c.ev.Skipped
	if ok {
		cancel = c.cancels[winner.n]
	}
	c.mu.Unlock()
	otelattr.RecordHedgeCall(ctx, sent-1, won, skip.otel())
	return winner, cancel, ok
}

// fire sends the next hedge when the delay has passed (on the timer's goroutine).
func (c *call[T]) fire() {
	c.mu.Lock()
	n, ctx, ok := c.next()
	if ok && c.sent < c.h.cfg.maxAttempts {
		c.timer.Reset(c.delay)
	}
	c.mu.Unlock()
	if ok {
		c.run(ctx, n)
	}
}

// next decides whether a hedge goes out now and gives it an index. c.mu is held.
func (c *call[T]) next() (int, context.Context, bool) {
	if c.done || c.stopped || c.sent >= c.h.cfg.maxAttempts {
		return 0, nil, false
	}
	if !c.h.allow(c.ctx, c.ev) {
		c.stopped = true
		return 0, nil, false
	}
	n := c.sent
	ctx, cancel := context.WithCancel(c.ctx)
	c.cancels[n] = cancel
	c.sent++
	c.pending++
	return n, ctx, true
}

// run sends hedge n and hands its result over. A hedge that cannot be prepared is
// not sent: it gives its token back, stops further hedges, and leaves the call to
// the copies already out.
func (c *call[T]) run(ctx context.Context, n int) {
	perr := safePrepare(c.p, n)
	c.mu.Lock()
	if c.done {
		// The call ended before this hedge went out; finish counted it unsent.
		c.returned[n] = true
		c.pending--
		c.mu.Unlock()
		c.p.abandon(n)
		return
	}
	if perr != nil {
		c.returned[n] = true
		c.pending--
		c.unsent++
		c.h.tokens.refund()
		c.stopped = true
		c.ev.Skipped = SkipNotReplayable
		c.cancels[n]()
		if c.pending == 0 {
			c.finish(c.last, c.hasLast, false)
		}
		c.mu.Unlock()
		return
	}
	c.started[n] = true
	c.h.hedges.Add(1)
	ctx, span := otelattr.StartAttempt(ctx, c.proto, otelattr.KindHedge, n+1)
	c.spans[n] = span
	c.mu.Unlock()
	start := time.Now()
	v, err := safeSend(c.p, ctx, n, span.Recording())
	c.result(attempt[T]{n: n, v: v, err: err, start: start, end: time.Now()})
}

// result takes the result of an attempt. Its span ends here, in the same step as
// the decision it leads to; or it has ended already, cancelled, with the call.
func (c *call[T]) result(a attempt[T]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.returned[a.n] = true
	c.pending--
	span := c.spans[a.n]
	c.spans[a.n] = otelattr.Attempt{}
	if c.done {
		c.p.discard(a.v, a.err, c.cancels[a.n])
		return
	}
	v := c.p.verdict(a.n, a.v, a.err)
	if v == success || v == answer && a.err == nil {
		span.End(otelattr.OutcomeSuccess, nil)
	} else {
		span.End(otelattr.OutcomeFailure, a.err)
	}
	switch v {
	case success:
		if c.w != nil {
			c.w.Add(a.end, a.end.Sub(a.start))
		}
		c.finish(a, true, true)
		return
	case answer:
		c.finish(a, true, false)
		return
	case refused:
		// A copy sent now would have even less time.
		c.stopped = true
		if a.n > 0 {
			// The primary decides the call.
			c.p.discard(a.v, a.err, c.cancels[a.n])
			if c.pending == 0 {
				c.finish(c.last, c.hasLast, false)
			}
			return
		}
	}
	// A failure: the call's result only if no other copy answers.
	if c.hasLast {
		c.p.discard(c.last.v, c.last.err, c.cancels[c.last.n])
	}
	c.last, c.hasLast = a, true
	if v == nonFatal {
		if n, ctx, ok := c.next(); ok {
			if c.sent < c.h.cfg.maxAttempts {
				c.timer.Reset(c.delay)
			}
			go c.run(ctx, n)
			return
		}
	}
	if c.pending == 0 {
		c.finish(a, true, false)
	}
}

// finish ends the call with winner (has false: none; ok: winner is a success).
// Attempts still in flight are cancelled, and their spans end now, cancelled: no
// attempt span outlives its call. A primary cut short by a successful hedge feeds the
// window with its time so far, a lower bound of its latency. c.mu is held.
func (c *call[T]) finish(winner attempt[T], has, ok bool) {
	c.done = true
	// A timer stopped before it fired never will: then, with no hedge sent, nothing
	// but the caller refers to the call any more.
	c.quiet = c.timer.Stop() && c.sent == 1
	c.winner, c.has = winner, has
	c.hedgeWon = has && ok && winner.n > 0
	if c.hasLast && (!has || c.last.n != winner.n) {
		c.p.discard(c.last.v, c.last.err, c.cancels[c.last.n])
	}
	for n, cancel := range c.cancels {
		if cancel == nil || c.returned[n] {
			continue
		}
		cancel()
		if !c.started[n] {
			// Given an index, never sent: its goroutine finds the call over.
			c.unsent++
			c.h.tokens.refund()
			continue
		}
		c.spans[n].End(otelattr.OutcomeCanceled, nil)
		c.spans[n] = otelattr.Attempt{}
		if n == 0 && ok && c.w != nil {
			now := time.Now()
			c.w.Add(now, now.Sub(c.start0))
		}
	}
	if has {
		c.ev.Winner = winner.n
	} else {
		c.ev.Winner = -1
	}
	if c.hedgeWon {
		c.h.wins.Add(1)
	}
	if c.doneCh != nil {
		close(c.doneCh)
	}
}

// safeSend turns a panic in an attempt (the base transport's) into an error: hedges
// run on goroutines of their own, where a panic would end the program.
func safeSend[T any](p protocol[T], ctx context.Context, n int, traced bool) (v T, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("hedge: attempt %d panicked: %v", n, r)
		}
	}()
	return p.send(ctx, n, traced)
}

// safePrepare is safeSend for prepare (an HTTP request's GetBody).
func safePrepare[T any](p protocol[T], n int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("hedge: preparing attempt %d panicked: %v", n, r)
		}
	}()
	return p.prepare(n)
}

// allow decides whether a hedge may go out now and takes its token; the hedge is
// counted in [Stats] once it is sent.
func (h *Hedger) allow(ctx context.Context, ev *Event) bool {
	if left, has := deadline.Remaining(ctx); has && left < h.cfg.floor {
		h.refusedDeadline.Add(1)
		ev.Skipped = SkipDeadline
		return false
	}
	if !h.tokens.take() {
		h.refusedCap.Add(1)
		ev.Skipped = SkipCap
		return false
	}
	return true
}
