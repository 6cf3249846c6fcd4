package deadlinekit

import (
	"context"
	"strconv"
	"time"

	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
)

// Public returns err as an edge service answers it to an end user: the same HTTP
// status, gRPC code and pushback (so [WriteHTTPError] and [GRPCError] send the same
// signals), with the message replaced by a short, stable reason that names no
// internal address, package or downstream: "downstream unavailable, retry in 5 s",
// "deadline exceeded", "overloaded, retry in 1 s". The whole chain of err is recorded
// on the span of ctx (an error event and the span's status), where the operator finds
// it in the trace. A nil err gives nil.
//
//	deadlinekit.WriteHTTPError(w, deadlinekit.Public(r.Context(), err))
func Public(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(otelcodes.Error, err.Error())
	}
	x := toWire(err)
	wait := comeBack(x.pushback, x.comeBack)
	return &WireError{HTTPStatus: x.status, Code: x.code, Message: reason(x.code, x.pushback, wait),
		Pushback: x.pushback, RetryAfter: x.comeBack, relayed: x.relayed}
}

// reason is the stable public reason of an answer with code c.
func reason(c codes.Code, pushback, wait time.Duration) string {
	var r string
	switch c {
	case codes.Canceled:
		return "request cancelled"
	case codes.DeadlineExceeded:
		if pushback < 0 {
			return "not enough time left to serve the request"
		}
		return "deadline exceeded"
	case codes.Unavailable:
		r = "downstream unavailable"
	case codes.ResourceExhausted:
		r = "overloaded"
		if wait <= 0 {
			return "rate limited"
		}
	case codes.InvalidArgument, codes.OutOfRange:
		return "invalid request"
	case codes.NotFound:
		return "not found"
	case codes.AlreadyExists, codes.Aborted:
		r = "conflict"
	case codes.PermissionDenied:
		return "permission denied"
	case codes.Unauthenticated:
		return "unauthenticated"
	case codes.FailedPrecondition:
		return "the request cannot be served in the current state"
	case codes.Unimplemented:
		return "not implemented"
	default:
		r = "internal error"
	}
	if wait > 0 {
		r += ", retry in " + strconv.FormatInt(ceilDiv(wait, time.Second), 10) + " s"
	}
	return r
}
