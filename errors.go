package deadlinekit

// The error table of DESIGN: one failure as an HTTP status and a gRPC code, and the
// mapping between the two. The functions a handler calls to pass a failure from one
// protocol to the other live beside it: errors_classify.go decides which answer an
// error gets (HTTPStatus), errors_http.go writes it for HTTP and reads an HTTP
// answer back (WriteHTTPError, FromHTTP), errors_grpc.go does the same for gRPC
// (GRPCError, FromGRPC), and errors_public.go words it for an end user (Public);
// connectkit relays through GRPCError.

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/deadline"
)

// StatusClientClosedRequest is the HTTP status of a request its caller cancelled
// (499, nginx's convention; gRPC Canceled).
const StatusClientClosedRequest = 499

// Sentinels for the downstream failures that have no sentinel in the core packages.
// A [*WireError] matches them under [errors.Is]; so do [context.DeadlineExceeded],
// [context.Canceled] and [deadline.ErrInsufficientBudget] for the conditions they
// name.
var (
	// ErrUnavailable: the downstream is unavailable (gRPC Unavailable, HTTP 502 and
	// 503), or could not be reached.
	ErrUnavailable = errors.New("deadlinekit: downstream unavailable")
	// ErrOverloaded: the downstream is overloaded or over quota (gRPC
	// ResourceExhausted, HTTP 429, HTTP 503 with a pushback).
	ErrOverloaded = errors.New("deadlinekit: downstream overloaded")
	// ErrInvalidArgument: the downstream found the request malformed (gRPC
	// InvalidArgument, HTTP 400), a deadline header among other things.
	ErrInvalidArgument = errors.New("deadlinekit: invalid argument")
)

// WireError is a failure as it travels between services: an HTTP status and a gRPC
// code for one condition, the message, and the pushback. [FromHTTP] and [FromGRPC]
// return it, with both HTTPStatus and Code set. A handler may return one of its own
// (say, Code ResourceExhausted with a Pushback) to answer with a condition that has
// no error of its own; a zero HTTPStatus is then derived from Code (ResourceExhausted
// with a Pushback or a RetryAfter: 503), a zero Code (OK) from HTTPStatus.
//
// Under [errors.Is] it matches [context.DeadlineExceeded] (DeadlineExceeded, 504),
// [deadline.ErrInsufficientBudget] (the same with a negative Pushback: a refusal for
// lack of budget), [context.Canceled] (Canceled, 499), [ErrUnavailable],
// [ErrOverloaded] and [ErrInvalidArgument]. [status.Code] reports its Code.
type WireError struct {
	// HTTPStatus is the HTTP status as received; one outside 400–599 is answered as
	// the status of Code.
	HTTPStatus int
	Code       codes.Code // the gRPC code
	// Message is the downstream's message, verbatim (from an HTTP body, at most 1 KiB
	// of it, trimmed).
	Message string
	// Pushback is what the downstream said about a retry (grpc-retry-pushback-ms,
	// Retry-After or google.rpc.RetryInfo): positive, wait that long; negative, do not
	// retry (the value was negative or malformed, as package retry reads it); zero,
	// nothing.
	Pushback time.Duration
	// RetryAfter is when the downstream said the request is worth sending again
	// (Retry-After, google.rpc.RetryInfo, a positive grpc-retry-pushback-ms), kept
	// apart from Pushback: a relay may say both "do not retry" (its own layers
	// already retried) and "come back in N" (its downstream's circuit opens then).
	// [FromHTTP] and [FromGRPC] set it beside a negative Pushback only: otherwise
	// Pushback is itself the wait. Zero when it named no wait.
	RetryAfter time.Duration

	err     error          // the error FromGRPC was given
	st      *status.Status // its status, for the details
	relayed bool           // read off a downstream's answer (FromHTTP, FromGRPC)
}

// Error returns Message, or a description of the status when there is none.
func (e *WireError) Error() string {
	if e.Message != "" {
		return e.Message
	}
	s, c := e.derive()
	return "deadlinekit: " + c.String() + " (HTTP " + strconv.Itoa(s) + ")"
}

// Is reports whether the error matches target; see [WireError].
func (e *WireError) Is(target error) bool {
	s, c := e.derive()
	switch target {
	case context.DeadlineExceeded:
		return c == codes.DeadlineExceeded
	case deadline.ErrInsufficientBudget:
		return c == codes.DeadlineExceeded && e.Pushback < 0
	case context.Canceled:
		return c == codes.Canceled
	case ErrUnavailable:
		return c == codes.Unavailable || s == http.StatusServiceUnavailable
	case ErrOverloaded:
		return c == codes.ResourceExhausted
	case ErrInvalidArgument:
		return c == codes.InvalidArgument
	}
	return false
}

// Unwrap returns the gRPC error [FromGRPC] was given, nil for other WireErrors.
func (e *WireError) Unwrap() error { return e.err }

// GRPCStatus returns the error as a gRPC status: Code, the message, the details of the
// status it came from, and google.rpc.RetryInfo for a ResourceExhausted with a
// positive Pushback.
func (e *WireError) GRPCStatus() *status.Status {
	_, c := e.derive()
	return wireStatus(e.st, c, e.Error(), comeBack(e.Pushback, e.RetryAfter))
}

// comeBack is the wait an answer names for coming back: a positive pushback, else
// retryAfter.
func comeBack(pushback, retryAfter time.Duration) time.Duration {
	if pushback > 0 {
		return pushback
	}
	return max(retryAfter, 0)
}

// derive returns the HTTP status and gRPC code, each derived from the other when unset.
func (e *WireError) derive() (int, codes.Code) {
	s, c := e.HTTPStatus, e.Code
	if s < 400 || s > 599 {
		s = 0
	}
	switch {
	case s == 0 && c == codes.OK:
		return http.StatusInternalServerError, codes.Unknown
	case s == 0:
		// ResourceExhausted with a wait is an overload (503), also when a hop
		// below gave up retrying it and said "do not retry" beside the wait.
		s = httpFromCode(c, comeBack(e.Pushback, e.RetryAfter))
	case c == codes.OK:
		c = codeFromHTTP(s, e.Pushback)
	}
	return s, c
}

// httpFromCode maps a gRPC code to an HTTP status, as google.rpc.Code documents it;
// ResourceExhausted with a wait is DESIGN's "overloaded, come back": 503.
func httpFromCode(c codes.Code, wait time.Duration) int {
	switch c {
	case codes.Canceled:
		return StatusClientClosedRequest
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		if wait > 0 {
			return http.StatusServiceUnavailable
		}
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// codeFromHTTP maps a failure's HTTP status to a gRPC code; see GRPCError.
func codeFromHTTP(s int, wait time.Duration) codes.Code {
	switch s {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusConflict:
		return codes.Aborted
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case StatusClientClosedRequest:
		return codes.Canceled
	case http.StatusNotImplemented:
		return codes.Unimplemented
	case http.StatusBadGateway:
		return codes.Unavailable
	case http.StatusServiceUnavailable:
		if wait > 0 {
			return codes.ResourceExhausted
		}
		return codes.Unavailable
	case http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	}
	if s >= 400 && s < 500 {
		return codes.FailedPrecondition
	}
	return codes.Unknown
}

func pushbackOf(d time.Duration, _ bool, err error) time.Duration {
	if err != nil {
		return -1
	}
	return d
}

// ceilDiv is d / unit rounded up, for a positive d: a pushback is never shortened.
func ceilDiv(d, unit time.Duration) int64 {
	q := d / unit
	if d%unit != 0 {
		q++
	}
	return int64(q)
}
