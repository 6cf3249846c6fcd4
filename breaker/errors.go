package breaker

import (
	"errors"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

// ErrOpen is the sentinel of a call refused by an open breaker: nothing was sent.
// Match it with [errors.Is]; the concrete error is an [*OpenError].
var ErrOpen = errors.New("circuit open")

// OpenError reports a call refused, before sending, by the circuit of Target, which
// lets its next probe through in RetryAfter (zero when the probe is due now but the
// half-open state's probes are all in flight: then RetryAfter is the time until
// they are given up on). Over gRPC its status is UNAVAILABLE.
//
// While the circuit is open, as many refused calls as it has probes ([WithProbes])
// are told to come back for them (the pushback, [OpenError.PushbackMs]), among those
// whose deadline leaves time to; the others are told that the probes are taken
// (pushback -1, "do not retry"), so that a retry layer above returns them at once
// instead of spending their budget waiting for probes they would not get.
type OpenError struct {
	Target     string
	State      State
	RetryAfter time.Duration
	taken      bool // the next probes are promised to earlier calls
}

func (e *OpenError) Error() string {
	s := e.Target + ": circuit " + e.State.String() + ", next probe in " + deadline.Format(e.RetryAfter)
	if e.taken {
		s += ", promised to earlier calls"
	}
	return s + " (call not sent)"
}

// Is reports whether target is [ErrOpen].
func (e *OpenError) Is(target error) bool { return target == ErrOpen }

// GRPCStatus is UNAVAILABLE with the error's message, for status.FromError and
// status.Code.
func (e *OpenError) GRPCStatus() *status.Status {
	return status.New(codes.Unavailable, e.Error())
}

// PushbackMs is the grpc-retry-pushback-ms value of the refusal: RetryAfter in
// milliseconds, rounded up so that a retry honouring it finds the probe due, or -1
// when the next probes are promised to earlier calls.
func (e *OpenError) PushbackMs() string {
	if e.taken {
		return pushback.DoNotRetry
	}
	ms := (e.RetryAfter + time.Millisecond - 1) / time.Millisecond
	return strconv.FormatInt(int64(max(ms, 0)), 10)
}

// pushbackValue is the grpc-retry-pushback-ms the refusal carries.
func (e *OpenError) pushbackValue() string { return e.PushbackMs() }

// localRefusal is a refusal before sending: an *OpenError or a *ThrottledError.
type localRefusal interface {
	error
	carried() error
	pushbackValue() string
}

// carried is the refusal as the adapters return it: the *OpenError (status
// UNAVAILABLE) carrying its pushback, so that a retry layer above reads the time until
// the next probe with pushback.Of, without a trailer or a response.
func (e *OpenError) carried() error {
	return &pushback.Error{Err: e, Value: e.PushbackMs()}
}
