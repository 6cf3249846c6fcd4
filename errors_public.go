package deadlinekit

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/propagate"
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
	return &WireError{HTTPStatus: x.status, Code: x.code, Message: publicText(err, x),
		Pushback: x.pushback, RetryAfter: x.comeBack, relayed: x.relayed}
}

// Public texts that are the same on every path.
const (
	textKeyReused = "this Idempotency-Key was used for a different request"
	keyErrorLead  = "malformed Idempotency-Key: " // dedup.KeyError's message
)

// publicText is what the edge tells an end user about err, whose answer is x: a
// text that helps the caller fix its request when one is safe to give (its own
// Idempotency-Key or deadline header was malformed, its key was used for another
// request), else the stable reason of x's code.
func publicText(err error, x wire) string {
	var ke *dedup.KeyError
	var te *propagate.TimeoutError
	switch {
	case errors.As(err, &ke):
		return ke.Error()
	case errors.As(err, &te):
		// The header and what is wrong with it, without the caller's value.
		return "malformed " + te.Header + " header: " + te.Reason
	case dedup.IsKeyReused(err) || x.status == http.StatusUnprocessableEntity && x.code == codes.FailedPrecondition:
		return textKeyReused
	case x.code == codes.InvalidArgument && x.relayed:
		// A hop below refused the caller's key (dedup's words, verbatim).
		if m, ok := relayedKeyError(x.msg); ok {
			return m
		}
	}
	return reason(x.code, x.pushback, comeBack(x.pushback, x.comeBack))
}

// relayedKeyError finds dedup's refusal of a malformed key in msg, a downstream's
// message: the text from "malformed Idempotency-Key: " on, when it is short,
// printable text (a reason dedup.ParseKey gives, which names only the caller's
// own key's faults).
func relayedKeyError(msg string) (string, bool) {
	i := strings.Index(msg, keyErrorLead)
	if i < 0 || i > len("idempotency-key: ") {
		return "", false
	}
	m := msg[i:]
	if len(m) > 200 || !utf8.ValidString(m) {
		return "", false
	}
	for _, r := range m {
		if !unicode.IsPrint(r) {
			return "", false
		}
	}
	return m, true
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
