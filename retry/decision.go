package retry

import (
	"context"
	"errors"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/otelattr"
)

// Verdict is a classifier's judgement of one attempt.
type Verdict uint8

const (
	// Answered: the downstream answered, and the answer is final. It includes
	// answers the caller treats as errors (HTTP 404, gRPC NOT_FOUND): they prove the
	// downstream is up, and they deposit into the [Budget].
	Answered Verdict = iota
	// Failed: the attempt failed and another attempt would not help, or must not be
	// made (a write that may have been done, a pushback that says "do not retry").
	// The failure is returned as is.
	Failed
	// Retryable: the attempt failed in a way another attempt may fix.
	Retryable
)

func (v Verdict) String() string {
	switch v {
	case Answered:
		return "answered"
	case Failed:
		return "failed"
	case Retryable:
		return "retryable"
	}
	return "verdict(?)"
}

// Decision is a classifier's verdict on one attempt, with the server's pushback.
type Decision struct {
	Verdict Verdict
	// Pushback is the wait the server asked for (Retry-After,
	// grpc-retry-pushback-ms, RetryInfo); it replaces the backoff when HasPushback
	// and it is positive. A pushback of zero (a Retry-After date in the past) waits
	// the backoff, so that clients do not all come back at once; a negative one
	// means "do not retry".
	Pushback    time.Duration
	HasPushback bool
	// Reason says why, in a few words; it appears in errors and events.
	Reason string

	// doNotRetry: the server said explicitly not to retry (a negative
	// grpc-retry-pushback-ms), as opposed to a pushback that was malformed. The stop
	// reason then says what the server meant: refused, or downstream_retried.
	doNotRetry bool
}

// Action is what the layer does after an attempt.
type Action uint8

const (
	// Return: the call ends with this attempt's result (answered, a failure not worth
	// retrying, or attempts exhausted).
	Return Action = iota
	// Retry: the layer waits Event.Wait, then makes another attempt.
	Retry
	// Stop: a retryable failure, but the layer gives up before its attempts ran out
	// (deadline rule, budget empty, pushback too long, context ended, inbound retry);
	// the call ends with the error in Event.Err.
	Stop
)

func (a Action) String() string {
	switch a {
	case Return:
		return "return"
	case Retry:
		return "retry"
	case Stop:
		return "stop"
	}
	return "action(?)"
}

// Event describes one attempt of a call, for [WithObserver].
type Event struct {
	// Attempt is the number of the attempt, 1 for the first.
	Attempt int
	// Took is how long the attempt ran.
	Took time.Duration
	// Decision is the classifier's verdict on the attempt.
	Decision Decision
	// Action is what the layer does next; Wait is the wait before the next attempt
	// when Action is Retry.
	Action Action
	Wait   time.Duration
	// Err is the attempt's error (for an HTTP answer with status ≥ 400, a
	// [*StatusError]; nil for other answers), or, when Action is Stop, the error the
	// call returns.
	Err error
}

// plan decides what follows a retryable failure of attempt n (1-based) of a call that
// may make max attempts. It returns the action, the wait before the next attempt, and
// the error to return on Stop. last is the attempt's failure, wrapped by stop errors.
//
// A Retry takes the retry's token; it is given back when the retry is not sent after
// all (the context ends during the wait, or a layer beneath refuses it before
// sending), so that such a call spends none.
func (c *config) plan(ctx context.Context, n, maxAttempts int, d Decision, last error) (Action, time.Duration, error) {
	if n >= maxAttempts {
		return Return, 0, nil
	}
	if err := ctx.Err(); err != nil {
		return Stop, 0, &StopError{Attempts: n, Reason: "context ended", Cause: context.Cause(ctx), Last: last, stop: ctxStop(ctx)}
	}
	var wait time.Duration
	pushback := d.HasPushback && d.Pushback > 0
	switch {
	case d.HasPushback && d.Pushback < 0:
		return Return, 0, nil
	case d.HasPushback && d.Pushback > c.maxPushback:
		return Stop, 0, &StopError{Attempts: n, Reason: "server pushback " + deadline.Format(d.Pushback) + " exceeds the cap of " + deadline.Format(c.maxPushback), Last: last, stop: otelattr.StopPushbackOverCap}
	case pushback:
		wait = d.Pushback
	default:
		// No pushback, or one of zero (a Retry-After date in the past): a wait of
		// nothing would send every client back at once, so the backoff, with its
		// jitter, applies.
		wait = c.backoff.Delay(n, c.random())
	}
	if left, ok := deadline.Remaining(ctx); ok && left <= wait+c.floor {
		return Stop, 0, &DeadlineError{Attempts: n, Remaining: left, Wait: wait, Floor: c.floor, Pushback: pushback, Last: last}
	}
	if !c.budget.TryWithdraw() {
		return Stop, 0, &BudgetExhaustedError{Attempts: n, Last: last}
	}
	return Retry, wait, nil
}

// waitToRetry waits d before retry n+1, whose token plan took. It returns nil when
// the retry may be sent; otherwise the context ended during the wait: the token is
// given back, and the call's stop reason recorded.
func (c *config) waitToRetry(ctx context.Context, n int, d time.Duration, last error) error {
	if err := sleep(ctx, d); err != nil {
		c.budget.refund()
		stop := ctxStop(ctx)
		otelattr.RecordRetryCall(ctx, n, stop)
		return &StopError{Attempts: n, Reason: "context ended while waiting to retry", Cause: context.Cause(ctx), Last: last, stop: stop}
	}
	return nil
}

// ctxStop is the stop reason of a call whose context has ended.
func ctxStop(ctx context.Context) otelattr.StopReason {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return otelattr.StopDeadline
	}
	return otelattr.StopCanceled
}

// localRefusal reports whether err is a layer beneath refusing the attempt before
// sending it, for lack of budget (package propagate's floor): a [*deadline.BudgetError].
// Nothing reached the downstream, and another attempt would have less time still.
func localRefusal(err error) bool {
	var be *deadline.BudgetError
	return errors.As(err, &be)
}

// localPushback reports whether err is a layer beneath refusing attempt n before
// sending it with a time to come back (package breaker's open circuit: the time until
// its next probe), and decides it: Retryable after that wait plus a share of the
// backoff drawn at random, which the deadline rule then weighs like a server's
// pushback, so that the call is retried only when the next probe comes before the
// deadline, and otherwise stops without spending a token. The random share keeps the
// calls refused together from coming back at the probe's instant, where all but the
// probes would be refused again: spread out, the first become the probes and the
// others find the circuit closed.
func (c *config) localPushback(err error, n int) (Decision, bool) {
	v, ok := pushback.Of(err)
	if !ok {
		return Decision{}, false
	}
	p, perr := pushback.ParseMs(v)
	if perr == nil && p > 0 {
		p += time.Duration(c.random() * float64(c.backoff.Delay(n, 0.5)))
	}
	return withPushback(Decision{Verdict: Retryable, Reason: "refused before sending, come back later"}, p, perr), true
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

func (c *config) observe(ctx context.Context, e Event) {
	if c.observer == nil {
		return
	}
	defer func() { _ = recover() }()
	c.observer(ctx, e)
}

func (c *config) newKey() (key string) {
	defer func() {
		if recover() != nil {
			key = NewIdempotencyKey()
		}
	}()
	return c.keys()
}
