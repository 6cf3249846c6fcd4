package deadlinekit

// Which answer an error gets: the rules of HTTPStatus, applied once (toWire) for
// every writer, WriteHTTPError, GRPCError and Public.

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
)

// HTTPStatus returns the HTTP status that answers err (200 for nil). The first rule
// that matches decides:
//
//   - the caller cancelled ([context.Canceled]): 499;
//   - a circuit open ([breaker.ErrOpen], also under retry's StopError): 503, with
//     the time until the next probe as the pushback;
//   - retry's deadline-rule StopError for a pushback that did not fit in the time left: the
//     last attempt's answer, with its pushback, by these rules;
//   - budget below the floor or spent ([deadline.ErrInsufficientBudget], also
//     retry's deadline-rule StopError), or [context.DeadlineExceeded]: 504;
//   - a [*WireError]: its status;
//   - a malformed inbound deadline header ([propagate.ErrMalformedTimeout]) or
//     Idempotency-Key ([dedup.ErrMalformedKey]): 400;
//   - a gRPC status: the status of its code (ResourceExhausted with a wait, also one
//     beside a "do not retry": 503, without: 429; a key used for a different
//     request, FailedPrecondition marked [dedup.IsKeyReused]: 422, as dedup's HTTP
//     middleware answers it; see [GRPCError] for the rest);
//   - a [*retry.StatusError] (an HTTP answer as an error: a retry observer's event;
//     retry.NewTransport itself returns the response, never one): its status, with
//     its header's pushback and Retry-After, as [FromHTTP] reads them;
//   - a transport error reaching the downstream ([net.Error], [*url.Error]): 502;
//   - anything else: 500.
//
// retry's stop errors other than the deadline rule's wrap the last attempt's failure,
// so exhausted retries answer with the last attempt's status.
func HTTPStatus(err error) int {
	if err == nil {
		return http.StatusOK
	}
	return toWire(err).status
}

// wire is one error's answer: on HTTP and on gRPC.
type wire struct {
	status   int
	code     codes.Code
	msg      string
	pushback time.Duration
	comeBack time.Duration  // the downstream's "come back in", apart from pushback
	st       *status.Status // the gRPC status err carried, for its details
	relayed  bool           // the failure is a downstream's
}

// toWire applies the rules of HTTPStatus to a non-nil err.
func toWire(err error) wire {
	var de *retry.StopError
	var we *WireError
	var se *retry.StatusError
	var ue *url.Error
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return wire{status: StatusClientClosedRequest, code: codes.Canceled, msg: message(err), pushback: wirePushback(err, context.Canceled),
			relayed: relayedAs(err, context.Canceled)}
	case errors.Is(err, breaker.ErrOpen):
		// Before the budget checks: a retry layer that gave up on an open circuit
		// for lack of time says so with a deadline error around the refusal, but
		// the caller is told about the circuit, and when its next probe is.
		oe, _ := breaker.IsOpen(err)
		wait := max(oe.RetryAfter, time.Millisecond)
		return wire{status: http.StatusServiceUnavailable, code: codes.Unavailable, msg: message(err), pushback: wait, comeBack: wait, relayed: true}
	case errors.As(err, &de) && de.Pushback && de.Last != nil:
		return relayedPushback(err, de)
	case errors.Is(err, deadline.ErrInsufficientBudget):
		return wire{status: http.StatusGatewayTimeout, code: codes.DeadlineExceeded, msg: message(err), pushback: -1,
			relayed: relayedAs(err, deadline.ErrInsufficientBudget)}
	case errors.Is(err, context.DeadlineExceeded):
		return wire{status: http.StatusGatewayTimeout, code: codes.DeadlineExceeded, msg: message(err), pushback: wirePushback(err, context.DeadlineExceeded),
			relayed: relayedAs(err, context.DeadlineExceeded)}
	case errors.As(err, &we):
		s, c := we.derive()
		x := wire{status: s, code: c, msg: message(err), pushback: we.Pushback, comeBack: we.RetryAfter, st: we.st, relayed: we.relayed}
		if x.st != nil && x.st.Code() != c {
			x.st = nil
		}
		return x
	case errors.Is(err, propagate.ErrMalformedTimeout), errors.Is(err, dedup.ErrMalformedKey):
		return wire{status: http.StatusBadRequest, code: codes.InvalidArgument, msg: message(err)}
	}
	if st, ok := status.FromError(err); ok {
		x := fromStatus(err, st)
		// A status that came through the stack's client (its last attempt's
		// pushback travels with it) is a downstream's.
		_, x.relayed = pushback.Of(err)
		return x
	}
	switch {
	case errors.As(err, &se) && se.StatusCode >= 400 && se.StatusCode <= 599:
		// The answer a retry layer stopped on (its budget spent, say): its signals
		// as FromHTTP reads them, so that an overload's "come back in" goes on up.
		e := httpFailure(se.StatusCode, se.Header)
		return wire{status: e.HTTPStatus, code: e.Code, msg: message(err), pushback: e.Pushback, comeBack: e.RetryAfter, relayed: true}
	case errors.As(err, &ue), errors.As(err, &ne):
		return wire{status: http.StatusBadGateway, code: codes.Unavailable, msg: message(err), relayed: true}
	}
	return wire{status: http.StatusInternalServerError, code: codes.Unknown, msg: message(err)}
}

// relayedAs reports whether err, which matches target (a context error or
// [deadline.ErrInsufficientBudget]), matches it only as a downstream's answer: through
// a [*WireError] read off that answer ([FromHTTP], [FromGRPC]) whose code says so (a
// relayed 504 or 499, DEADLINE_EXCEEDED or CANCELED, a guard's refusal). A match
// anywhere else in err's chain is this server's own: its context ended (also when
// that ended a call to a downstream, or a retry layer's wait), its retry layer had no
// time for another attempt, its propagate layer refused to send: not relayed.
func relayedAs(err, target error) bool {
	return !localMatch(err, target)
}

// localMatch reports whether err matches target under [errors.Is] other than through
// the code of a relayed [*WireError]; below such a WireError it looks at the error
// FromGRPC was given, which may carry this server's own context error.
func localMatch(err, target error) bool {
	if err == nil {
		return false
	}
	if we, ok := err.(*WireError); ok && we.relayed {
		return localMatch(we.err, target)
	}
	if err == target {
		return true
	}
	if x, ok := err.(interface{ Is(error) bool }); ok && x.Is(target) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return localMatch(u.Unwrap(), target)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if localMatch(e, target) {
				return true
			}
		}
	}
	return false
}

// relayedPushback is the wire form of a retry layer's stop because the downstream's
// "come back in X" did not fit in the time left. That is the downstream's word to
// pass on, with its pushback: the caller's own caller may have the time to come back.
func relayedPushback(err error, de *retry.StopError) wire {
	x := toWire(de.Last)
	x.msg = message(err)
	if x.pushback != 0 {
		return x
	}
	var we *WireError
	if errors.As(err, &we) && we.Pushback != 0 {
		x.pushback = we.Pushback
	} else if v, ok := pushback.Of(err); ok {
		if p, perr := pushback.ParseMs(v); perr == nil {
			x.pushback = p
		}
	}
	if x.code == codes.ResourceExhausted { // 429 or, with a wait, 503
		x.status = httpFromCode(x.code, x.pushback)
	}
	return x
}

// fromStatus is the wire form of err, whose gRPC status is st: its code, its
// RetryInfo as the pushback (-1 when malformed), and the HTTP status they make.
func fromStatus(err error, st *status.Status) wire {
	x := wire{code: st.Code(), msg: message(err), st: st}
	if d, found, perr := pushback.RetryInfoDelay(st); perr != nil {
		x.pushback = -1
	} else if found {
		x.pushback = d
	}
	x.status = httpFromCode(x.code, x.pushback)
	if dedup.IsKeyReused(err) {
		x.status = http.StatusUnprocessableEntity // as dedup's HTTP middleware answers it
	}
	return x
}

// wirePushback is the pushback of the first *WireError in err, when that is what
// matches target.
func wirePushback(err, target error) time.Duration {
	var we *WireError
	if errors.As(err, &we) && we.Is(target) {
		return we.Pushback
	}
	return 0
}

// message is the text sent for err: its own, but a gRPC status's message without
// grpc-go's prefix, and the root package's prefix on a core package's bare error.
func message(err error) string {
	if ue, ok := err.(*url.Error); ok && toolkitError(ue.Err) {
		// net/http's "Post \"http://…\": " before a toolkit's refusal, which names
		// its target itself: the message leads with the cause.
		return message(ue.Err)
	}
	switch e := err.(type) {
	case *deadline.BudgetError, *propagate.TimeoutError:
		return "deadlinekit: " + e.Error()
	case interface{ GRPCStatus() *status.Status }:
		if st := e.GRPCStatus(); st != nil {
			return st.Message()
		}
	}
	return err.Error()
}

// toolkitError reports whether err is one of the layers' own failures, whose
// message leads with its cause.
func toolkitError(err error) bool {
	var se *retry.StopError
	var oe *breaker.OpenError
	var te *breaker.ThrottledError
	var be *deadline.BudgetError
	return errors.As(err, &se) || errors.As(err, &oe) || errors.As(err, &te) || errors.As(err, &be)
}
