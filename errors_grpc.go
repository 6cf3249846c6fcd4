package deadlinekit

// A failure on gRPC: returned by a handler (GRPCError), read back from a call's error
// and trailer (FromGRPC).

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

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

// grpcPushback reads a gRPC answer's pushback; negative for "do not retry".
func grpcPushback(st *status.Status, trailer metadata.MD) time.Duration {
	return pushbackOf(pushback.FromGRPC(st, trailer))
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
