package retry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/otelattr"
)

// Sentinels. The typed errors below match them under [errors.Is].
var (
	// ErrBudgetExhausted: the retry budget had no token for the retry.
	ErrBudgetExhausted = errors.New("retry budget exhausted")
	// ErrStopped: the layer gave up on a retryable failure before its attempts ran
	// out. Every error the layer itself returns matches it.
	ErrStopped = errors.New("retry stopped")
)

// DeadlineError is returned when the time left before the deadline is not more than
// the next wait plus the floor: a retry could not finish in time.
// It matches [context.DeadlineExceeded], [deadline.ErrInsufficientBudget] and
// [ErrStopped] under [errors.Is], and unwraps to the last attempt's failure. The gRPC
// adapter reports it as DEADLINE_EXCEEDED; an HTTP server relaying it answers 504.
type DeadlineError struct {
	Attempts  int           // attempts made
	Remaining time.Duration // time left when the layer decided
	Wait      time.Duration // the backoff or pushback the next attempt needed first
	Floor     time.Duration // the least an attempt needs ([WithFloor])
	Pushback  bool          // Wait was the server's pushback rather than the backoff
	Last      error         // the last attempt's failure
}

func (e *DeadlineError) Error() string {
	what := "backoff"
	if e.Pushback {
		what = "pushback"
	}
	return fmt.Sprintf("retry: no time for another attempt after %d: %s left, need %s %s + %s floor: %v",
		e.Attempts, deadline.Format(e.Remaining), deadline.Format(e.Wait), what, deadline.Format(e.Floor), e.Last)
}

// Is reports whether target is [context.DeadlineExceeded],
// [deadline.ErrInsufficientBudget] or [ErrStopped].
func (e *DeadlineError) Is(target error) bool {
	return target == context.DeadlineExceeded || target == deadline.ErrInsufficientBudget || target == ErrStopped
}

// Unwrap returns the last attempt's failure.
func (e *DeadlineError) Unwrap() error { return e.Last }

// BudgetExhaustedError is returned when a retryable failure found the [Budget] empty.
// It matches [ErrBudgetExhausted] and [ErrStopped], and unwraps to the last attempt's
// failure (so a gRPC caller still sees the last attempt's code).
type BudgetExhaustedError struct {
	Attempts int   // attempts made
	Last     error // the last attempt's failure
}

func (e *BudgetExhaustedError) Error() string {
	return fmt.Sprintf("retry: budget exhausted after %d attempt(s): %v", e.Attempts, e.Last)
}

// Is reports whether target is [ErrBudgetExhausted] or [ErrStopped].
func (e *BudgetExhaustedError) Is(target error) bool {
	return target == ErrBudgetExhausted || target == ErrStopped
}

// Unwrap returns the last attempt's failure.
func (e *BudgetExhaustedError) Unwrap() error { return e.Last }

// StopError is returned when the layer gives up on a retryable failure for another
// reason: the context ended while waiting (Cause is its cause), the server's pushback
// was longer than the cap, or the request body could not be replayed (Cause is
// GetBody's error). It matches [ErrStopped] and unwraps to both Cause and Last.
type StopError struct {
	Attempts int    // attempts made
	Reason   string // why the layer stopped
	Cause    error  // what stopped it, when that was an error, else nil
	Last     error  // the last attempt's failure

	stop otelattr.StopReason // the stop reason recorded for it
}

func (e *StopError) Error() string {
	return fmt.Sprintf("retry: stopped after %d attempt(s): %s: %v", e.Attempts, e.Reason, e.Last)
}

// Is reports whether target is [ErrStopped].
func (e *StopError) Is(target error) bool { return target == ErrStopped }

// Unwrap returns the context's cause (if any) and the last attempt's failure.
func (e *StopError) Unwrap() []error {
	switch {
	case e.Cause == nil:
		return []error{e.Last}
	case e.Last == nil:
		return []error{e.Cause}
	}
	return []error{e.Cause, e.Last}
}

// StatusError stands for an HTTP failure status in errors and events: the last
// failure wrapped by a stop error, when the attempt got an answer rather than an
// error.
type StatusError struct {
	StatusCode int
	Status     string // e.g. "503 Service Unavailable"
}

func (e *StatusError) Error() string {
	code := strconv.Itoa(e.StatusCode)
	text := strings.TrimPrefix(e.Status, code+" ")
	if text == "" {
		text = http.StatusText(e.StatusCode)
	}
	return "HTTP " + code + " " + text
}
