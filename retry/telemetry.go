package retry

import (
	"context"
	"errors"
	"net/http"

	"github.com/deadlinekit/deadlinekit/internal/record"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// report hands the outcome of attempt e.Attempt to the attempt's span and, when the
// call ends with it, the call's totals and stop reason to the call's span (package
// otelattr); then to the user's observer, if any. single is why the call may make
// only one attempt when the layer cut its attempts to one (see stopReason). d is the decision on the attempt.
func (c *config) report(ctx context.Context, att record.Attempt, e Event, d decision, maxAttempts int, single record.StopReason) {
	outcome := record.OutcomeFailure
	if e.Action == Return && d.verdict == Answered {
		outcome = record.OutcomeSuccess
	}
	// An attempt cut short because the caller left is canceled, not failed.
	att.End(record.Cut(ctx, outcome), e.Err)
	if e.Action != Retry {
		record.RetryCall(ctx, e.Attempt, stopReason(ctx, e, d, maxAttempts, single))
	}
	c.observe(ctx, e)
}

// stopReason says why the call made no further attempt after e. single is why the
// layer allowed the call one attempt only (caller_retries: the caller is retrying;
// not_retryable: the body cannot be replayed), empty when it did not cut them.
func stopReason(ctx context.Context, e Event, d decision, maxAttempts int, single record.StopReason) record.StopReason {
	switch {
	case d.verdict == Answered:
		return record.StopAnswered
	case ctx.Err() != nil:
		// The attempt failed because the caller gave up (or its deadline passed),
		// whatever the classifier made of it.
		return ctxStop(ctx)
	case d.doNotRetry && refusalCode(e.Err):
		return record.StopRefused // a guard refused for lack of budget
	case d.doNotRetry:
		return record.StopDownstreamRetried // the one-layer rule
	case d.verdict == Failed && localRefusal(e.Err):
		return record.StopDeadline // refused beneath, before sending
	case d.verdict == Failed:
		return record.StopNotRetryable
	case e.Action == Return && d.hasPushback && d.pushback < 0:
		return record.StopPushback // a malformed pushback: do not retry
	case e.Action == Return:
		if maxAttempts == 1 && single != "" {
			return single
		}
		return record.StopAttemptsExhausted
	}
	var se *StopError
	if errors.As(e.Err, &se) && se.stop != "" {
		return se.stop
	}
	return record.StopNotRetryable
}

// refusalCode reports whether err is the answer a guard refuses with: HTTP 504, gRPC
// DEADLINE_EXCEEDED.
func refusalCode(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.StatusCode == http.StatusGatewayTimeout
	}
	return status.Code(err) == codes.DeadlineExceeded
}

// attemptKind is the kind of attempt n.
func attemptKind(n int) record.AttemptKind {
	if n == 1 {
		return record.KindPrimary
	}
	return record.KindRetry
}
