package deadlinekit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
)

// The edge answers a short stable reason, with the status and every signal of the
// full answer; the whole chain is on the server span.
func TestPublicAnswer(t *testing.T) {
	open := &retry.StopError{Attempts: 1, Reason: "no time for another attempt",
		Cause: errors.New("no time"), Last: &breaker.OpenError{Target: "http://127.0.0.1:18081", State: breaker.Open, RetryAfter: 4900 * time.Millisecond}}
	for _, c := range []struct {
		name       string
		err        error
		status     int
		body       string
		retryAfter string
	}{
		{"a downstream's open circuit", open, 503, "downstream unavailable, retry in 5 s", "5"},
		{"a relayed 503", deadlinekit.FromHTTP(&http.Response{StatusCode: 503, Header: http.Header{}, Body: http.NoBody}, nil), 503, "downstream unavailable", ""},
		{"no time left", context.DeadlineExceeded, 504, "deadline exceeded", ""},
		{"cancelled", context.Canceled, 499, "request cancelled", ""},
		{"overloaded", &deadlinekit.WireError{Code: codes.ResourceExhausted, Message: "pool 10.0.0.7 full", Pushback: 1500 * time.Millisecond}, 503, "overloaded, retry in 2 s", "2"},
		{"the handler's own failure", errors.New("pq: connection to 10.1.2.3 refused"), 500, "internal error", ""},
		{"a malformed key", fmt.Errorf("gateway: %w", mustKeyError(strings.Repeat("k", 256))), 400, "malformed Idempotency-Key: longer than 255 characters", ""},
		{"a key with a non-ASCII character", mustKeyError("clé"), 400, "malformed Idempotency-Key: character 'é' (U+00E9) at position 2 is not visible ASCII", ""},
		{"a malformed key a gRPC hop refused", deadlinekit.FromGRPC(status.Error(codes.InvalidArgument, "idempotency-key: malformed Idempotency-Key: empty"), nil), 400, "malformed Idempotency-Key: empty", ""},
		{"a hop's other invalid argument", deadlinekit.FromGRPC(status.Error(codes.InvalidArgument, "pq: column \"amount\" of 10.1.2.3 is null"), nil), 400, "invalid request", ""},
		{"a malformed deadline header", &propagate.TimeoutError{Header: "Grpc-Timeout", Value: "soon", Reason: "no digits"}, 400, "malformed Grpc-Timeout header: no digits", ""},
		{"a key reused, over HTTP", deadlinekit.FromHTTP(&http.Response{StatusCode: 422, Header: http.Header{}, Body: http.NoBody}, nil), 422, "this Idempotency-Key was used for a different request", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			ctx, span := tp.Tracer("t").Start(context.Background(), "server")
			w := httptest.NewRecorder()
			deadlinekit.WriteHTTPError(w, deadlinekit.Public(ctx, c.err))
			span.End()
			if w.Code != c.status || strings.TrimSpace(w.Body.String()) != c.body || w.Header().Get("Retry-After") != c.retryAfter {
				t.Errorf("answered %d %q Retry-After %q; want %d %q %q", w.Code, strings.TrimSpace(w.Body.String()), w.Header().Get("Retry-After"), c.status, c.body, c.retryAfter)
			}
			s := rec.Ended()[0]
			if s.Status().Description != c.err.Error() || len(s.Events()) != 1 {
				t.Errorf("span status %q with %d events; want the whole error %q recorded", s.Status().Description, len(s.Events()), c.err)
			}
		})
	}
}

// Every message leads with its cause: an open circuit names its target first, and
// a stop of the retry layer starts with the failure it stopped on.
func TestMessagesLeadWithTheCause(t *testing.T) {
	open := &breaker.OpenError{Target: "http://127.0.0.1:18081", State: breaker.Open, RetryAfter: 4900 * time.Millisecond}
	stop := &retry.StopError{Attempts: 1, Reason: "no time for another attempt", Cause: errors.New("no time"), Last: open}
	for _, m := range []string{open.Error(), stop.Error()} {
		if !strings.HasPrefix(m, "http://127.0.0.1:18081: circuit open, next probe in 4.9s") || strings.Contains(m, "after 1") {
			t.Errorf("message %q; want it to lead with the circuit's target and state", m)
		}
	}
}

// Through net/http, a toolkit's refusal comes wrapped in a *url.Error; the relayed
// message still leads with the refusal, which names its target.
func TestRelayedMessageLeadsWithTheRefusal(t *testing.T) {
	for _, refusal := range []error{
		&breaker.OpenError{Target: "http://127.0.0.1:18081", State: breaker.Open, RetryAfter: time.Second},
		&breaker.ThrottledError{Target: "http://127.0.0.1:18081", Level: criticality.Sheddable, Probability: 0.5, RetryAfter: time.Second},
	} {
		w := httptest.NewRecorder()
		deadlinekit.WriteHTTPError(w, &url.Error{Op: "Post", URL: "http://127.0.0.1:18081/reserve", Err: refusal})
		if got := strings.TrimSpace(w.Body.String()); got != refusal.Error() {
			t.Errorf("relayed %q; want %q", got, refusal.Error())
		}
	}
}

func mustKeyError(key string) error {
	_, err := dedup.ParseKey([]string{key})
	if err == nil {
		panic("key " + key + " parses")
	}
	return err
}
