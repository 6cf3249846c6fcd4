package retry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/record"
)

// ErrBudgetExhausted is the Cause of a [*StopError] when the retry [Budget] had no
// token for the retry.
var ErrBudgetExhausted = errors.New("retry budget exhausted")

// StopError is returned when the layer gives up on a retryable failure before its
// attempts ran out; over HTTP only when there is no response to return ([NewTransport]
// returns the last response it got, and the StopError is its last [Event]'s Err).
// Cause says why:
//
//   - the deadline rule: the time left (Remaining) was not more than the wait before
//     the next attempt (Wait: the backoff, or the server's pushback when Pushback)
//     plus the floor ([WithFloor]): a retry could not finish in time. Cause then
//     matches [deadline.ErrInsufficientBudget] and [context.DeadlineExceeded] under
//     [errors.Is]; the gRPC adapter reports DEADLINE_EXCEEDED, and an HTTP server
//     relaying it answers 504.
//   - [ErrBudgetExhausted]: the [Budget] had no token for the retry.
//   - the context ended (Cause is its cause); the gRPC adapter reports CANCELED or
//     DEADLINE_EXCEEDED.
//   - the request body could not be replayed (Cause is GetBody's error).
//   - nil: the server's pushback was longer than the cap ([WithMaxPushback]).
//
// It unwraps to Cause and to Last, the last attempt's failure, so that a gRPC caller
// still sees the last attempt's code, and an observer the HTTP answer's [*StatusError].
type StopError struct {
	Attempts int    // attempts made
	Reason   string // why the layer stopped, in a few words
	Cause    error  // what stopped it, when that was an error, else nil
	Last     error  // the last attempt's failure

	// The deadline rule's numbers, zero for other stops.
	Remaining time.Duration // time left when the layer decided
	Wait      time.Duration // the backoff or pushback the next attempt needed first
	Floor     time.Duration // the least an attempt needs
	Pushback  bool          // Wait was the server's pushback rather than the backoff

	// Unkept: the last attempt was answered (Last is its [*StatusError]), but its
	// response could not be kept while the layer waited to retry (its body was
	// larger or slower than the bounds, or its connection broke), so there is no
	// response to return in its place.
	Unkept bool

	stop record.StopReason // the stop reason recorded for it
}

// Error leads with the last attempt's failure, the cause, and says after it why the
// layer did not try again: "<cause>; not retried: 4ms left, the pushback asks 5s".
func (e *StopError) Error() string {
	var why string
	switch {
	case e.deadlineRule():
		what := "the backoff"
		if e.Pushback {
			what = "the pushback"
		}
		why = fmt.Sprintf("%s left, %s asks %s", deadline.Format(e.Remaining), what, deadline.Format(e.Wait))
		if e.Floor > 0 {
			why += " and an attempt needs " + deadline.Format(e.Floor)
		}
	case errors.Is(e.Cause, ErrBudgetExhausted):
		why = "retry budget exhausted"
	default:
		why = e.Reason
	}
	if e.Unkept {
		why += " (the answer received was not kept: its body was beyond 64 KiB or 100 ms, or cut)"
	}
	verb := "not retried"
	if e.Attempts > 1 {
		verb = "stopped after " + strconv.Itoa(e.Attempts) + " attempts"
	}
	if e.Last == nil {
		return "retry: " + verb + ": " + why
	}
	cause := e.Last.Error()
	if st, ok := e.Last.(interface{ GRPCStatus() *status.Status }); ok && st.GRPCStatus() != nil {
		cause = st.GRPCStatus().Message() // without grpc-go's "rpc error: code = … desc =" prefix
	}
	return cause + "; " + verb + ": " + why
}

// Unwrap returns Cause (if any) and the last attempt's failure.
func (e *StopError) Unwrap() []error {
	switch {
	case e.Cause == nil:
		return []error{e.Last}
	case e.Last == nil:
		return []error{e.Cause}
	}
	return []error{e.Cause, e.Last}
}

// deadlineRule reports whether e is a stop under the deadline rule.
func (e *StopError) deadlineRule() bool {
	return errors.Is(e.Cause, deadline.ErrInsufficientBudget)
}

// errNoTime is the Cause of a stop under the deadline rule.
var errNoTime error = noTimeError{}

type noTimeError struct{}

func (noTimeError) Error() string { return "no time for another attempt" }

func (noTimeError) Is(target error) bool {
	return target == deadline.ErrInsufficientBudget || target == context.DeadlineExceeded
}

// StatusError is an HTTP answer with a failure status (≥ 400) as an error: in
// events ([Event].Err), and as the last failure a [*StopError] in an event wraps.
// [NewTransport] returns the answer itself, never a StatusError.
type StatusError struct {
	StatusCode int
	Status     string      // e.g. "503 Service Unavailable"
	Header     http.Header // the answer's header
}

func (e *StatusError) Error() string {
	code := strconv.Itoa(e.StatusCode)
	text := strings.TrimPrefix(e.Status, code+" ")
	if text == "" {
		text = http.StatusText(e.StatusCode)
	}
	return "HTTP " + code + " " + text
}
