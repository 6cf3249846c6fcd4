package retry

import (
	"context"
	"errors"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/internal/record"
)

// protocol is what the core needs from an adapter (HTTP, gRPC): how to send one
// attempt, and how to read what came back in the core's terms. T is what an attempt
// returns besides its error (the HTTP response; nothing for gRPC).
type protocol[T any] interface {
	// send makes attempt n (1-based) under actx, the attempt's context; traced says
	// actx carries a recording attempt span, whose trace context the request should
	// carry. ok is false when the attempt could not be sent at all (an HTTP body that
	// cannot be replayed): err then says why, and the call stops.
	send(actx context.Context, n int, traced bool) (v T, err error, ok bool)
	// replied reports whether v holds the downstream's own word (an HTTP response, a
	// gRPC pushback trailer), which a pushback of a layer beneath does not override.
	replied(v T) bool
	// judge classifies an attempt that a layer beneath did not refuse.
	judge(ctx context.Context, v T, err error, timedOut bool) outcome
	// discard disposes of a result that is not returned, then calls cancel (the
	// attempt context's, nil when it has none).
	discard(v T, cancel context.CancelFunc)
	// deliver hands the last attempt's result to the caller; cancel is released when
	// the caller is done with it.
	deliver(v T, err error, cancel context.CancelFunc) (T, error)
	// dedup reads what a deduping server said of the attempt of a keyed call, judged
	// d; ok is false when the call carries no key.
	dedup(ctx context.Context, v T, d decision) (a record.DedupAnswer, ok bool)
	// writes is how many times the attempt's request header was written beneath
	// (0: not counted): net/http sends some requests again by itself, each a copy
	// that may have run; a hedging layer's copies count too.
	writes(v T) int
	// answered reports whether v is the downstream's answer (an HTTP response), which
	// the call returns in place of a stop error of the layer: a RoundTripper returns
	// the response it got, whatever its status.
	answered(v T) bool
	// keep disposes of v, an answer about to be retried, as discard does, and returns
	// a copy of it that holds nothing open (an HTTP response with its body read into
	// memory, within bounds), for the call to return should it stop before another
	// attempt is sent; ok is false when v cannot be kept.
	keep(v T, cancel context.CancelFunc) (kept T, ok bool)
	// stopped gives a stop error of the layer its protocol's form (a gRPC code).
	stopped(ctx context.Context, err error) error
}

// outcome is an adapter's reading of one attempt.
type outcome struct {
	d          decision
	err        error // the attempt's failure as events and stop errors show it
	idempotent bool  // the call may safely run twice
}

// loop is one call through the layer: the attempt loop, written once for every
// protocol. It lives on the caller's stack.
type loop[T any, P protocol[T]] struct {
	c      *config
	p      P
	proto  record.Protocol
	method string
	max    int               // attempts allowed
	single record.StopReason // why max was cut to one, when it was
	in     *inbound          // the server-side state of the request being served, if any
	// token is when the budget gave the attempt under way, a retry, its token: the
	// receipt its refund needs; held says it has not been given back.
	token time.Duration
	held  bool
}

// begin sets the attempts of a call under ctx: one only when the request being
// served is itself a retry (the one-layer rule).
func (l *loop[T, P]) begin(ctx context.Context) {
	l.max = l.c.maxAttempts
	l.in = inboundFrom(ctx)
	if l.in != nil && l.in.retry && l.max > 1 {
		l.max, l.single = 1, record.StopCallerRetries
	}
}

// cut makes the call a single attempt, for reason.
func (l *loop[T, P]) cut(reason record.StopReason) {
	if l.max > 1 {
		l.max, l.single = 1, reason
	}
}

// try is one attempt of a call, as the loop knows it once it has been made.
type try[T any] struct {
	v        T
	err      error
	sent     bool               // false: the attempt could not be sent (err says why)
	timedOut bool               // this layer's per-attempt timeout ended it
	took     time.Duration      // measured only for observers
	span     record.Attempt     // the attempt's span
	cancel   context.CancelFunc // the attempt context's, nil when it has none
}

// run makes the attempts of the call under ctx, the call's context, and returns the
// last attempt's result, or the error of a stop.
func (l *loop[T, P]) run(ctx context.Context) (T, error) {
	var zero T
	var a try[T]
	held := false // a.v is a result neither delivered nor discarded
	defer func() {
		if held { // a callback of the user's panicked: nobody will get a.v
			l.p.discard(a.v, a.cancel)
		}
	}()
	var last error // the previous attempt's failure
	var kept T     // the previous attempt's answer, kept while the layer waits
	haveKept := false
	for n := 1; ; n++ {
		a = l.attempt(ctx, n)
		if !a.sent {
			err := l.unsent(ctx, a, n, last)
			if haveKept {
				return l.p.deliver(kept, nil, nil)
			}
			return zero, err
		}
		haveKept = false
		held = true
		e := Event{Attempt: n, Method: l.method, Took: a.took, TimedOut: a.timedOut}
		d := l.judge(ctx, a, &e)
		if da, ok := l.p.dedup(ctx, a.v, d); ok {
			a.span.Dedup(ctx, da)
		}
		if w := l.p.writes(a.v); w > 0 {
			a.span.TransportResends(ctx, w)
		}
		fail := e.Err
		action, wait, stopErr := l.after(ctx, a, e, d)
		held = false
		if action == Return || (action == Stop && l.p.answered(a.v)) {
			// An answer is returned as it came, whyever the layer stopped: the stop
			// reason is on the span and in the last event.
			return l.p.deliver(a.v, a.err, a.cancel)
		}
		if action == Retry && l.p.answered(a.v) {
			kept, haveKept = l.p.keep(a.v, a.cancel)
		} else {
			l.p.discard(a.v, a.cancel)
		}
		if action == Stop {
			return zero, stopErr
		}
		if err := l.c.waitToRetry(ctx, n, wait, fail); err != nil {
			l.giveBack()
			l.gaveUp()
			if haveKept {
				return l.p.deliver(kept, nil, nil)
			}
			var se *StopError
			if errors.As(err, &se) && action == Retry && l.p.answered(a.v) {
				se.Unkept = true
			}
			return zero, l.p.stopped(ctx, err)
		}
		last = fail
	}
}

// attempt makes attempt n, under a context (and a span) of its own.
func (l *loop[T, P]) attempt(ctx context.Context, n int) (a try[T]) {
	c := l.c
	actx := ctx
	if c.attemptTimeout > 0 {
		actx, a.cancel = deadline.WithAttemptTimeout(ctx, c.attemptTimeout)
	}
	actx, a.span = record.StartAttempt(actx, l.proto, attemptKind(n), n)
	// The clock is read only when needed: it is not free on every platform.
	var start time.Time
	if len(c.observers) > 0 {
		start = time.Now()
	}
	a.v, a.err, a.sent = l.p.send(actx, n, a.span.Recording())
	if len(c.observers) > 0 {
		a.took = time.Since(start)
	}
	a.timedOut = a.cancel != nil && a.err != nil && attemptTimedOut(ctx, actx, c.attemptTimeout)
	return a
}

// judge classifies the attempt of e. A refusal of a layer beneath is read here, the
// same for every protocol, and is not the classifier's to judge; the rest is the
// adapter's, then the user's classifier's.
func (l *loop[T, P]) judge(ctx context.Context, a try[T], e *Event) decision {
	if a.err != nil {
		e.Err = a.err
		if localRefusal(a.err) {
			// Refused beneath before anything was sent: not a transport failure, and
			// another attempt would have less time still. A retry's token comes back.
			l.giveBack()
			return decision{verdict: Failed, reason: "refused before sending, for lack of budget"}
		}
		if d, ok := localPushback(a.err); ok && !l.p.replied(a.v) {
			// Refused beneath before anything was sent, too (an open circuit): a
			// retry's token comes back, and another is taken should the call retry.
			l.giveBack()
			return d
		}
	}
	o := l.p.judge(ctx, a.v, a.err, a.timedOut)
	e.Err, e.Idempotent = o.err, o.idempotent
	d := o.d
	if l.c.classifier != nil {
		d = l.c.classify(*e, d)
	}
	return d
}

// classify asks the user's classifier about the attempt of e, which the layer judged
// d. It runs on the caller's goroutine: its panic is the caller's.
func (c *config) classify(e Event, d decision) decision {
	e.Verdict, e.Reason = d.verdict, d.reason
	if v := c.classifier(e); v != d.verdict {
		d.verdict = v
		d.reason += " (classifier: " + v.String() + ")"
	}
	return d
}

// after acts on the decision on the attempt of e: it deposits a success, plans a
// retry, and reports the attempt. It returns what the loop does next.
func (l *loop[T, P]) after(ctx context.Context, a try[T], e Event, d decision) (Action, time.Duration, error) {
	c := l.c
	e.Verdict, e.Reason = d.verdict, d.reason
	if d.verdict != Retryable {
		if d.verdict == Answered {
			c.budget.deposit(ctx)
		}
		c.report(ctx, a.span, e, d, l.max, l.single)
		if d.doNotRetry {
			l.gaveUp()
		}
		return Return, 0, nil
	}
	action, wait, stopErr := c.plan(ctx, e.Attempt, l.max, d, e.Err)
	if action == Retry {
		action, wait, stopErr = l.withdraw(ctx, e.Attempt, wait, e.Err)
	}
	e.Action, e.Wait = action, wait
	if action == Stop {
		stopErr = l.p.stopped(ctx, stopErr)
		e.Err = stopErr
	}
	c.report(ctx, a.span, e, d, l.max, l.single)
	if action != Retry && (l.max > 1 || (d.hasPushback && d.pushback < 0)) {
		l.gaveUp()
	}
	return action, wait, stopErr
}

// unsent ends attempt n, which could not be sent (a.err says why): the call stops,
// and a retry's token comes back.
func (l *loop[T, P]) unsent(ctx context.Context, a try[T], n int, last error) error {
	if a.cancel != nil {
		a.cancel()
	}
	l.giveBack()
	a.span.End(record.OutcomeFailure, a.err)
	record.RetryCall(ctx, n-1, record.StopNotRetryable)
	return &StopError{Attempts: n - 1, Reason: a.err.Error(), Cause: a.err, Last: last, stop: record.StopNotRetryable}
}

// gaveUp tells the server side of the request being served, if any, that this layer
// gave up on a retryable failure (or was told not to retry).
func (l *loop[T, P]) gaveUp() {
	if l.in != nil {
		l.in.gaveUp.Store(true)
	}
}

// plan decides what follows a retryable failure of attempt n (1-based) of a call that
// may make max attempts, the budget aside ([loop.withdraw] asks it for a Retry). It
// returns the action, the wait before the next attempt, and the error to return on
// Stop. last is the attempt's failure, wrapped by stop errors.
func (c *config) plan(ctx context.Context, n, maxAttempts int, d decision, last error) (Action, time.Duration, error) {
	if n >= maxAttempts {
		return Return, 0, nil
	}
	if err := ctx.Err(); err != nil {
		return Stop, 0, &StopError{Attempts: n, Reason: "context ended", Cause: context.Cause(ctx), Last: last, stop: ctxStop(ctx)}
	}
	var wait time.Duration
	pushback := d.hasPushback && d.pushback > 0
	switch {
	case d.hasPushback && d.pushback < 0:
		return Return, 0, nil
	case d.hasPushback && d.pushback > c.maxPushback:
		return Stop, 0, &StopError{Attempts: n, Reason: "server pushback " + deadline.Format(d.pushback) + " exceeds the cap of " + deadline.Format(c.maxPushback), Last: last, stop: record.StopPushbackOverCap}
	case pushback:
		wait = d.pushback
	default:
		// No pushback, or one of zero (a Retry-After date in the past): a wait of
		// nothing would send every client back at once, so the backoff, with its
		// jitter, applies.
		wait = c.backoff.Delay(n, c.random())
	}
	if left, ok := deadline.Remaining(ctx); ok && left <= wait+c.floor {
		return Stop, 0, &StopError{Attempts: n, Reason: "no time for another attempt", Cause: errNoTime, Last: last,
			Remaining: left, Wait: wait, Floor: c.floor, Pushback: pushback, stop: record.StopDeadline}
	}
	return Retry, wait, nil
}

// withdraw takes the token of the retry that follows attempt n after wait, or stops
// the call when the budget has none for it. The token is given back when the retry
// is not sent after all (the context ends during the wait, or a layer beneath
// refuses it before sending), so that such a call spends none: l.token is the
// receipt for that.
func (l *loop[T, P]) withdraw(ctx context.Context, n int, wait time.Duration, last error) (Action, time.Duration, error) {
	at, ok := l.c.budget.tryWithdraw(ctx)
	if !ok {
		return Stop, 0, &StopError{Attempts: n, Reason: "budget exhausted", Cause: ErrBudgetExhausted, Last: last, stop: record.StopBudgetEmpty}
	}
	l.token, l.held = at, true
	return Retry, wait, nil
}

// giveBack gives the budget back the token of the retry under way, which was not
// sent after all; it does nothing when the attempt is the first, or its token was
// given back already.
func (l *loop[T, P]) giveBack() {
	if l.held {
		l.c.budget.refund(l.token)
		l.held = false
	}
}

// waitToRetry waits d before retry n+1. It returns nil when the retry may be sent;
// otherwise the context ended during the wait (the retry's token is the caller's to
// give back), and the call's stop reason is recorded.
func (c *config) waitToRetry(ctx context.Context, n int, d time.Duration, last error) error {
	if err := sleep(ctx, d); err != nil {
		stop := ctxStop(ctx)
		record.RetryCall(ctx, n, stop)
		return &StopError{Attempts: n, Reason: "context ended while waiting to retry", Cause: context.Cause(ctx), Last: last, stop: stop}
	}
	return nil
}

// ctxStop is the stop reason of a call whose context has ended.
func ctxStop(ctx context.Context) record.StopReason {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return record.StopDeadline
	}
	return record.StopCanceled
}

// localRefusal reports whether err is a layer beneath refusing the attempt before
// sending it, for lack of budget (package propagate's floor): a [*deadline.BudgetError].
// Nothing reached the downstream, and another attempt would have less time still.
func localRefusal(err error) bool {
	var be *deadline.BudgetError
	return errors.As(err, &be)
}

// localPushback reports whether err is a layer beneath refusing an attempt before
// sending it with a time to come back (package breaker's open circuit: the time until
// its next probe), and decides it: Retryable after that wait, which the deadline rule
// then weighs like a server's pushback, so that the call is retried only when the
// next probe comes before the deadline, and otherwise stops without spending a
// token. The wait is the refusal's own, with no jitter: the breaker tells only as
// many calls to come back as it has probes (the others get "do not retry"), and
// they come back at the probe's instant to be its probes, with all the time their
// deadline leaves for its answer.
func localPushback(err error) (decision, bool) {
	v, ok := pushback.Of(err)
	if !ok {
		return decision{}, false
	}
	p, perr := pushback.ParseMs(v)
	return withPushback(decision{verdict: Retryable, reason: "refused before sending, come back later"}, p, perr), true
}

// sleep waits d or until ctx ends; it reports the context's error in that case.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// attemptTimedOut reports whether the per-attempt limit, rather than the call's own
// deadline or cancellation, ended an attempt that failed: the attempt had a deadline
// of its own, earlier than the call's, and it has passed, or less than a tenth of the
// limit was left. The clock is consulted because a server's DEADLINE_EXCEEDED can
// arrive a moment before the attempt context's timer has run, or a little before the
// attempt's deadline when the layer beneath sent the server a budget rounded down or
// minus a reserve (package propagate).
func attemptTimedOut(ctx, actx context.Context, limit time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	ad, ok := actx.Deadline()
	if !ok {
		return false
	}
	if cd, ok := ctx.Deadline(); ok && !ad.Before(cd) {
		return false
	}
	return actx.Err() != nil || time.Until(ad) <= limit/10
}

// observe hands e to the user's observers, in the order given. An observer runs on
// the caller's goroutine: its panic is the caller's.
func (c *config) observe(ctx context.Context, e Event) {
	for _, f := range c.observers {
		f(ctx, e)
	}
}
