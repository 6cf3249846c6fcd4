package deadlinekit

// The error table of DESIGN, as functions a handler calls to pass a failure from one
// protocol to the other: HTTPStatus, WriteHTTPError and GRPCError towards the wire,
// FromHTTP and FromGRPC back from it.

import (
	"context"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
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

// WriteHTTPError answers an HTTP request with err, before anything else was written:
// the status of [HTTPStatus], the message as a text/plain body, and the pushback as
// headers: grpc-retry-pushback-ms: -1 for "do not retry" (a refusal for lack of
// budget among others), Retry-After (whole seconds, rounded up) and
// grpc-retry-pushback-ms (milliseconds) for a wait; Retry-After alone beside a "do
// not retry" when the downstream named a wait (a relayed open circuit), so that each
// signal keeps its one value. A failure that came from a downstream (an open
// circuit, a transport error, a [*WireError] read by [FromHTTP] or [FromGRPC], also
// a downstream's 504 or 499, exhausted retries) carries deadlinekit-relayed: 1, which
// tells the caller's breaker that this server is up. This server's own timeout or
// cancellation does not: its context's error (also when it ended a call to a
// downstream), its retry layer's "no time for another attempt", its propagate
// layer's refusal to send. A nil err writes nothing.
//
// The message is err's own, except that a gRPC status gives its message without
// grpc-go's "rpc error: code = ... desc =" prefix, and that a bare
// [*deadline.BudgetError] or [*propagate.TimeoutError] takes this package's prefix,
// "deadlinekit: ". Under [WithEdge], the message is [Public]'s, and err goes on the
// request's span.
func WriteHTTPError(w http.ResponseWriter, err error) {
	if err == nil {
		return
	}
	x := toWire(err)
	if st := edgeOfWriter(w); st != nil {
		x.msg = publicText(err, x) // at the edge, Public's words
		st.record(err)
	}
	h := w.Header()
	switch {
	case x.pushback < 0:
		h.Set(pushback.Key, pushback.DoNotRetry)
	case x.pushback > 0:
		h.Set(pushback.Key, strconv.FormatInt(ceilDiv(x.pushback, time.Millisecond), 10))
	}
	if wait := comeBack(x.pushback, x.comeBack); wait > 0 {
		h.Set(pushback.RetryAfterKey, strconv.FormatInt(ceilDiv(wait, time.Second), 10))
	}
	if x.relayed {
		h.Set(pushback.RelayedKey, pushback.Yes)
	}
	http.Error(w, x.msg, x.status)
}

// GRPCError returns the error a gRPC handler returns for err (nil for nil), and sets
// the pushback as the call's trailer grpc-retry-pushback-ms: -1 for "do not retry", or
// the wait in milliseconds. ctx must be the handler's context (or one derived from
// it), so that the trailer can be set: grpc.SetTrailer needs it; with another context
// the trailer is silently left out.
//
// The code follows the rules of [HTTPStatus]: Canceled; Unavailable for an open
// circuit, with the time until its next probe; DeadlineExceeded (with -1 for
// a refusal for lack of budget); a [*WireError]'s code; InvalidArgument for a
// malformed deadline header or Idempotency-Key; a gRPC status's own code (so exhausted retries keep the
// last attempt's code); an HTTP status mapped as google.rpc.Code documents it (400
// InvalidArgument, 401 Unauthenticated, 403 PermissionDenied, 404 NotFound, 409
// Aborted, 429 ResourceExhausted, 499 Canceled, 501 Unimplemented, 502 Unavailable,
// 503 Unavailable, or ResourceExhausted with a pushback, 504 DeadlineExceeded, other
// 4xx FailedPrecondition, other 5xx Unknown); Unavailable for a transport error;
// Unknown otherwise. A wait the downstream named also goes into the status as
// google.rpc.RetryInfo (package retry needs it to retry a ResourceExhausted), so that
// it survives a "do not retry" in the trailer; a failure that came from a downstream
// carries the trailer deadlinekit-relayed: 1, as with [WriteHTTPError].
//
// The error returned unwraps to err, for the server's own interceptors. Under
// [WithEdge], the message is [Public]'s, and err goes on the call's span.
func GRPCError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	x := toWire(err)
	if st := edgeOf(ctx); st != nil {
		x.msg = publicText(err, x) // at the edge, Public's words
		st.record(err)
	}
	var kv []string
	if x.pushback != 0 {
		v := pushback.DoNotRetry
		if x.pushback > 0 {
			v = strconv.FormatInt(ceilDiv(x.pushback, time.Millisecond), 10)
		}
		kv = append(kv, pushback.Key, v)
	}
	if x.relayed {
		kv = append(kv, pushback.RelayedKey, pushback.Yes)
	}
	if len(kv) > 0 {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(kv...))
	}
	return &grpcError{st: wireStatus(x.st, x.code, x.msg, comeBack(x.pushback, x.comeBack)), err: err}
}

// grpcError is what GRPCError returns: the status grpc-go sends, over the error it
// stands for.
type grpcError struct {
	st  *status.Status
	err error
}

func (e *grpcError) Error() string              { return e.st.Message() }
func (e *grpcError) Unwrap() error              { return e.err }
func (e *grpcError) GRPCStatus() *status.Status { return e.st }

// Limits on what FromHTTP reads of a failure's body.
const (
	messageLimit = 1 << 10 // bytes kept as the message
	drainLimit   = 4 << 10 // bytes read, so that the connection can be reused
)

// FromHTTP returns the error an HTTP call's result stands for, taking the two results
// of [http.Client.Do] (or of a RoundTrip) as they come:
//
//	resp, err := client.Do(req)
//	if err := deadlinekit.FromHTTP(resp, err); err != nil {
//		return nil, deadlinekit.GRPCError(ctx, err)
//	}
//	defer resp.Body.Close()
//
// A transport error is returned unchanged. A status below 400 is a success: FromHTTP
// returns nil and leaves the body to the caller, who reads and closes it. Any other
// status gives a [*WireError]: the status, its gRPC code (see [GRPCError]), the body
// as the message when it is text (text/plain, JSON, or no Content-Type; at most 1 KiB
// kept), and the pushback from grpc-retry-pushback-ms, else Retry-After, read as
// package retry reads them (a negative or malformed value means "do not retry"). For
// a failure FromHTTP reads at most 4 KiB of the body and closes it: the caller must
// not use it. The read ends, at the latest, with the request's context.
//
// 504 with grpc-retry-pushback-ms: -1 (a guard's refusal) matches
// [deadline.ErrInsufficientBudget] and [context.DeadlineExceeded]; 504 alone only the
// latter; 499 matches [context.Canceled]; 503 [ErrUnavailable], and [ErrOverloaded]
// too with a pushback; 429 [ErrOverloaded]; 400 [ErrInvalidArgument].
func FromHTTP(resp *http.Response, err error) error {
	if err != nil {
		// net/http has already closed the body of a response that comes with an
		// error (a CheckRedirect failure).
		return err
	}
	if resp == nil {
		return errors.New("deadlinekit: no HTTP response and no error")
	}
	if resp.StatusCode >= 100 && resp.StatusCode < 400 {
		return nil
	}
	e := httpFailure(resp.StatusCode, resp.Header)
	e.Message = readMessage(resp)
	return e
}

// httpFailure is the relayed failure an HTTP answer with status s and header h
// stands for: the code and the signals FromHTTP reads, without the message.
func httpFailure(s int, h http.Header) *WireError {
	now := time.Now()
	e := &WireError{HTTPStatus: s, Pushback: httpPushback(h, now), relayed: true}
	if e.Pushback < 0 {
		e.RetryAfter = pushback.ComeBackHTTP(h, now)
	}
	e.Code = codeFromHTTP(s, e.Pushback)
	return e
}

// FromGRPC returns the error a gRPC call's error stands for (nil for nil). trailer
// points at the call's trailer, captured with [grpc.Trailer]; it is read only when
// FromGRPC runs, so one line does:
//
//	var tr metadata.MD
//	deadlinekit.WriteHTTPError(w, deadlinekit.FromGRPC(conn.Invoke(ctx, method, in, out, grpc.Trailer(&tr)), &tr))
//
// Through the stack's retry layer ([DialOptions]) the error itself carries the last
// attempt's grpc-retry-pushback-ms, and trailer may be nil:
//
//	deadlinekit.WriteHTTPError(w, deadlinekit.FromGRPC(conn.Invoke(ctx, method, in, out), nil))
//
// Otherwise a nil trailer loses the downstream's grpc-retry-pushback-ms, and with it
// the "do not retry" of a refusal. An error that is not a gRPC status is returned
// unchanged, and so is a [*WireError].
//
// A status gives a [*WireError] that unwraps to err: the code, its HTTP status (see
// [HTTPStatus]), the status's message, and the pushback from the trailer's
// grpc-retry-pushback-ms, else google.rpc.RetryInfo (a negative or malformed value
// means "do not retry"). DeadlineExceeded with the trailer -1 (a guard's refusal)
// matches [deadline.ErrInsufficientBudget] and [context.DeadlineExceeded];
// DeadlineExceeded alone only the latter; Canceled matches [context.Canceled];
// Unavailable [ErrUnavailable]; ResourceExhausted [ErrOverloaded]; InvalidArgument
// [ErrInvalidArgument].
func FromGRPC(err error, trailer *metadata.MD) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*WireError); ok {
		return err
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() == codes.OK {
		return err
	}
	var md metadata.MD
	if trailer != nil {
		md = *trailer
	}
	if len(md.Get(pushback.Key)) == 0 {
		// Through the stack's retry layer, the error carries its last attempt's
		// pushback itself.
		if v, ok := pushback.Of(err); ok {
			md = metadata.Pairs(pushback.Key, v)
		}
	}
	e := &WireError{Code: st.Code(), Message: st.Message(), Pushback: grpcPushback(st, md), err: err, st: st, relayed: true}
	if e.Pushback < 0 {
		e.RetryAfter = pushback.ComeBackGRPC(st, md)
	}
	e.HTTPStatus, _ = e.derive()
	if dedup.IsKeyReused(err) {
		e.HTTPStatus = http.StatusUnprocessableEntity // as dedup's HTTP middleware answers it
	}
	return e
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
	var be *deadline.BudgetError
	return errors.As(err, &se) || errors.As(err, &oe) || errors.As(err, &be)
}

// wireStatus builds the gRPC status of an answer, keeping the details of the status
// it came from (from, when its code is c), with google.rpc.RetryInfo for a positive
// wait.
func wireStatus(from *status.Status, c codes.Code, msg string, wait time.Duration) *status.Status {
	var st *status.Status
	if from != nil && from.Code() == c {
		p := from.Proto()
		p.Message = msg
		st = status.FromProto(p)
	} else {
		st = status.New(c, msg)
	}
	if wait <= 0 {
		return st
	}
	if _, found, _ := pushback.RetryInfoDelay(st); found {
		return st
	}
	if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); err == nil {
		return withInfo
	}
	return st
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

// httpPushback reads an HTTP answer's pushback; negative for "do not retry".
func httpPushback(h http.Header, now time.Time) time.Duration {
	return pushbackOf(pushback.FromHTTP(h, now))
}

// grpcPushback reads a gRPC answer's pushback; negative for "do not retry".
func grpcPushback(st *status.Status, trailer metadata.MD) time.Duration {
	return pushbackOf(pushback.FromGRPC(st, trailer))
}

func pushbackOf(d time.Duration, _ bool, err error) time.Duration {
	if err != nil {
		return -1
	}
	return d
}

// readMessage reads a failure's body for its message and closes it.
func readMessage(resp *http.Response) string {
	if resp.Body == nil || resp.Body == http.NoBody {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, drainLimit))
	_ = resp.Body.Close()
	if !textual(resp.Header.Get("Content-Type")) {
		return ""
	}
	if len(b) > messageLimit {
		b = b[:messageLimit]
		// Drop the rune the cut split, rather than show it as U+FFFD.
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0; i++ {
			if r, size := utf8.DecodeLastRune(b); r != utf8.RuneError || size != 1 {
				break
			}
			b = b[:len(b)-1]
		}
	}
	// Each invalid byte becomes U+FFFD, three bytes: cut again, on a rune's start.
	text := strings.ToValidUTF8(string(b), "\uFFFD")
	if len(text) > messageLimit {
		cut := messageLimit
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut]
	}
	return strings.TrimSpace(text)
}

// textual reports whether a body of this Content-Type can serve as a message.
func textual(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "text/plain" || mt == "application/json" || mt == "application/problem+json"
}

// ceilDiv is d / unit rounded up, for a positive d: a pushback is never shortened.
func ceilDiv(d, unit time.Duration) int64 {
	q := d / unit
	if d%unit != 0 {
		q++
	}
	return int64(q)
}
