package retry

import (
	"context"
	"errors"

	"github.com/deadlinekit/deadlinekit/otelattr"
)

// report hands the outcome of attempt e.Attempt to the attempt's span and, when the
// call ends with it, the call's totals and stop reason to the call's span (package
// otelattr); then to the user's observer, if any.
func (c *config) report(ctx context.Context, att otelattr.Attempt, e Event, maxAttempts int) {
	outcome := otelattr.OutcomeFailure
	if e.Action == Return && e.Decision.Verdict == Answered {
		outcome = otelattr.OutcomeSuccess
	}
	att.End(outcome, e.Err)
	if e.Action != Retry {
		otelattr.RecordRetryCall(ctx, e.Attempt, stopReason(ctx, e, maxAttempts, c.maxAttempts))
	}
	c.observe(ctx, e)
}

// stopReason says why the call made no further attempt after e.
func stopReason(ctx context.Context, e Event, maxAttempts, configured int) otelattr.StopReason {
	switch {
	case e.Decision.Verdict == Answered:
		return otelattr.StopAnswered
	case e.Decision.Verdict == Failed:
		return otelattr.StopNotRetryable
	case e.Action == Return && e.Attempt >= maxAttempts:
		if maxAttempts == 1 && configured > 1 && ServingRetry(ctx) {
			return otelattr.StopCallerRetries
		}
		return otelattr.StopAttemptsExhausted
	case e.Action == Return:
		return otelattr.StopPushback // a negative pushback: the server said no
	}
	var de *DeadlineError
	var be *BudgetExhaustedError
	switch {
	case errors.As(e.Err, &de):
		return otelattr.StopDeadline
	case errors.As(e.Err, &be):
		return otelattr.StopBudgetEmpty
	case e.Decision.HasPushback && ctx.Err() == nil:
		return otelattr.StopPushback // pushback beyond the cap
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return otelattr.StopDeadline
	default:
		return otelattr.StopCanceled
	}
}

// attemptKind is the kind of attempt n.
func attemptKind(n int) otelattr.AttemptKind {
	if n == 1 {
		return otelattr.KindPrimary
	}
	return otelattr.KindRetry
}
