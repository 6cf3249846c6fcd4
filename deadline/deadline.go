package deadline

import (
	"context"
	"errors"
	"time"
)

// DefaultBudget is the budget [DefaultPolicy] gives to a context that has no deadline,
// and the budget a server gives a unary request that came without one (package
// propagate). A stream gets no default: a timeout used as a stream's whole budget
// kills a watch or a long download that was doing well.
const DefaultBudget = 30 * time.Second

// DefaultFloor is the least time left for which a retry or a hedge goes out, about the
// least a meaningful attempt needs (package retry's and package hedge's WithFloor
// default to it). It is no longer the floor of a hop: a constant is wrong for a 2 ms
// handler and for a 200 ms one, and one at every hop compounds down a chain. A
// server's guard learns its floor from its own handler's durations (shortcircuit),
// and a client, which cannot know the downstream's, refuses to send only below
// [MinFloor] (propagate).
const DefaultFloor = 20 * time.Millisecond

// MinFloor is the least budget worth sending to a hop whose needs are not known, and
// the least floor a server's guard learns: a millisecond, about what a request
// spends on the wire and in the server's own layers before a handler can do
// anything. Package propagate's client floor defaults to it; package shortcircuit's
// learned floor is never below it.
const MinFloor = time.Millisecond

// ErrInsufficientBudget is the sentinel for a budget that cannot pay for the work:
// nothing is left, or less than the floor. Match it with [errors.Is]; the concrete
// error is a [*BudgetError].
var ErrInsufficientBudget = errors.New("insufficient time budget")

// BudgetError reports that the time left (Remaining) is less than the time the next
// step needs (Needed). Remaining is zero or negative when the deadline has passed.
//
// errors.Is(err, ErrInsufficientBudget) and errors.Is(err, context.DeadlineExceeded)
// both hold for a *BudgetError.
type BudgetError struct {
	Remaining time.Duration // time left on the context when the check was made
	Needed    time.Duration // the least the step needs (a floor or an explicit need)
	// Reserve is the part of Needed kept back for the answer's way back (a
	// [Policy]'s reserve), zero when none: Needed is then the floor plus it.
	Reserve time.Duration
}

func (e *BudgetError) Error() string {
	need := Format(e.Needed)
	if e.Reserve > 0 {
		need += " (" + Format(e.Needed-e.Reserve) + " floor + " + Format(e.Reserve) + " reserve)"
	}
	if e.Remaining <= 0 {
		return "insufficient time budget: deadline passed " + Format(-e.Remaining) + " ago, need " + need
	}
	return "insufficient time budget: " + Format(e.Remaining) + " left, need " + need
}

// Format writes d at the precision a person reads in an error message, the one way
// every deadlinekit message writes a duration: to 10 ms from a second up (1.53s), to
// 0.1 ms from a millisecond up (7.9ms), to the microsecond below (850µs).
func Format(d time.Duration) string {
	a := d
	if a < 0 {
		a = -a
	}
	switch {
	case a >= time.Second:
		d = d.Round(10 * time.Millisecond)
	case a >= time.Millisecond:
		d = d.Round(100 * time.Microsecond)
	default:
		d = d.Round(time.Microsecond)
	}
	return d.String()
}

// Is reports whether target is [ErrInsufficientBudget] or [context.DeadlineExceeded].
func (e *BudgetError) Is(target error) bool {
	return target == ErrInsufficientBudget || target == context.DeadlineExceeded
}

// Remaining returns the time left before ctx's deadline and whether ctx has one. The
// result is negative once the deadline has passed. It uses the monotonic clock reading
// kept in the deadline, so wall-clock steps do not move it.
func Remaining(ctx context.Context) (time.Duration, bool) {
	d, ok := ctx.Deadline()
	if !ok {
		return 0, false
	}
	return time.Until(d), true
}

// Check returns a [*BudgetError] when ctx has a deadline and less than need is left
// before it (always when the deadline has passed). A context without a deadline has
// room for anything.
func Check(ctx context.Context, need time.Duration) error {
	left, ok := Remaining(ctx)
	if !ok {
		return nil
	}
	if left <= 0 || left < need {
		return &BudgetError{Remaining: left, Needed: need}
	}
	return nil
}

// AttemptTimeout returns the timeout for one attempt of a call: min(limit, time left).
// A limit of zero or less means "no per-attempt limit". ok is false when neither the
// limit nor a deadline bounds the attempt. The result is zero or negative when the
// deadline has already passed.
func AttemptTimeout(ctx context.Context, limit time.Duration) (timeout time.Duration, ok bool) {
	left, has := Remaining(ctx)
	switch {
	case limit <= 0:
		return left, has
	case !has || limit < left:
		return limit, true
	default:
		return left, true
	}
}

// WithAttemptTimeout returns a context for one attempt, bounded by
// min(limit, time left) ([AttemptTimeout]). With no limit (limit ≤ 0) it returns a
// cancelable child of ctx with the same deadline.
func WithAttemptTimeout(ctx context.Context, limit time.Duration) (context.Context, context.CancelFunc) {
	if limit <= 0 {
		return context.WithCancel(ctx)
	}
	// context.WithTimeout keeps the parent's deadline when it is earlier, which is
	// exactly min(limit, time left).
	return context.WithTimeout(ctx, limit)
}
