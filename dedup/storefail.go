package dedup

import (
	"context"
	"errors"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
)

// ErrUnavailable means that a [Store] cannot be reached: it failed, did not answer
// within its bound, or fails fast while it waits to probe a backend that failed.
// Stores return it as an [*UnavailableError] (errors.Is(err, ErrUnavailable)); the
// middleware treats every store error but [ErrLeaseLost] and [ErrAnswerTooLarge] as
// this one.
var ErrUnavailable = errors.New("dedup: the idempotency store cannot be reached")

// UnavailableError is a store's [ErrUnavailable] with what it knows of its return.
type UnavailableError struct {
	// RetryIn is when the store expects to try its backend again (its next probe
	// after a failure); zero when it does not know. The middleware's 503 /
	// Unavailable says to come back then, or after [WithStoreRetryAfter] without
	// it, never later than the request's deadline.
	RetryIn time.Duration
	// Err is the failure seen, if any (nil for a fast failure while the store waits
	// to probe again).
	Err error
}

func (e *UnavailableError) Error() string {
	s := ErrUnavailable.Error()
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	if e.RetryIn > 0 {
		s += " (next try in " + deadline.Format(e.RetryIn) + ")"
	}
	return s
}

// Is reports whether target is [ErrUnavailable].
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns the failure seen.
func (e *UnavailableError) Unwrap() error { return e.Err }

// storeDown is the come-back of a request with ctx answered 503 / Unavailable for the
// store failure err: the store's RetryIn, or WithStoreRetryAfter's, capped at the
// time the request has left (coming back later is no use to its caller), at least
// 1 ms.
func (c *core) storeDown(ctx context.Context, err error) time.Duration {
	d := c.c.storeRetryAfter
	if ue, ok := errors.AsType[*UnavailableError](err); ok && ue.RetryIn > 0 {
		d = ue.RetryIn
	}
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return max(d, time.Millisecond)
}

// storeDownMessage is the text of the 503 / Unavailable for the store failure err.
func storeDownMessage(err error, comeBack time.Duration) string {
	msg := ErrUnavailable.Error()
	if err != nil && !errors.Is(err, ErrUnavailable) {
		msg += ": " + err.Error()
	} else if ue, ok := errors.AsType[*UnavailableError](err); ok && ue.Err != nil {
		msg += ": " + ue.Err.Error()
	}
	return msg + "; come back in " + deadline.Format(comeBack)
}
