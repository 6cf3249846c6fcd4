package hedge_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/propagate"
)

// TestPrimaryOverPropagate: above propagate's transport with a reserve, the
// primary goes out as propagate alone would send it: under the caller's deadline
// less the reserve, told that budget, with the chain rule's mark, in a header map
// of its own (the caller's is untouched), its context alive until the answer's
// body is closed, and released then.
func TestPrimaryOverPropagate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sent *http.Request
		base := testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			sent = r
			return response(r, 200, io.NopCloser(strings.NewReader("ok"))), nil
		})
		rt := hedge.NewTransport(propagate.NewTransport(base, propagate.WithReserve(100*time.Millisecond)),
			hedge.WithDelay(hedge.Delay{Initial: time.Millisecond}))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		parent, _ := ctx.Deadline()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://backend.test/", nil)
		req.Header.Set("X-Caller", "1")
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if dl, ok := sent.Context().Deadline(); !ok || !dl.Equal(parent.Add(-100*time.Millisecond)) {
			t.Errorf("attempt's deadline %v, %v; want the caller's less the reserve, %v", dl, ok, parent.Add(-100*time.Millisecond))
		}
		if got, err := propagate.DecodeGRPCTimeout(sent.Header.Get(propagate.HeaderGRPCTimeout)); err != nil || got != 900*time.Millisecond {
			t.Errorf("grpc-timeout %v, %v; want 900ms", got, err)
		}
		if sent.Header.Get("Deadlinekit-Hedged-Above") != "1" || sent.Header.Get("X-Caller") != "1" {
			t.Errorf("sent header %v; want the caller's with the mark", sent.Header)
		}
		if len(req.Header) != 1 {
			t.Errorf("caller's header changed: %v", req.Header)
		}
		if sent.Context().Err() != nil {
			t.Fatal("attempt's context ended before the body was read")
		}
		resp.Body.Close()
		if sent.Context().Err() == nil {
			t.Error("attempt's context not released by Close")
		}
	})
}

// TestUnhedgedOverPropagate: a call the layer does not hedge (a write), traced,
// whose call span this layer starts, goes out over propagate's transport with the
// call span's trace context, the budget less the reserve and the caller's headers,
// the caller's request untouched.
func TestUnhedgedOverPropagate(t *testing.T) {
	var sent *http.Request
	base := testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = r
		return response(r, 200, http.NoBody), nil
	})
	rt := hedge.NewTransport(propagate.NewTransport(base, propagate.WithReserve(100*time.Millisecond)))
	otel.SetTextMapPropagator(propagation.TraceContext{})
	defer otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("t").Start(context.Background(), "handle")
	defer span.End()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://backend.test/", nil)
	req.Header.Set("X-Caller", "1")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, err := propagate.DecodeGRPCTimeout(sent.Header.Get(propagate.HeaderGRPCTimeout)); err != nil || got > time.Minute-100*time.Millisecond || got < time.Minute-time.Second {
		t.Errorf("grpc-timeout %v, %v; want a minute less the reserve", got, err)
	}
	tc := sent.Header.Get("Traceparent")
	if sent.Header.Get("X-Caller") != "1" || !strings.Contains(tc, span.SpanContext().TraceID().String()) {
		t.Errorf("sent header %v; want the caller's with the call's trace context", sent.Header)
	}
	if len(req.Header) != 1 {
		t.Errorf("caller's header changed: %v", req.Header)
	}
}
