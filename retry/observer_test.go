package retry_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"

	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/retry"
)

// Observers given several times add up: each is called, in the order given, with
// the same event.
func TestObserversAddUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got []string
		first := retry.WithObserver(func(_ context.Context, e retry.Event) { got = append(got, "first "+e.Action.String()) })
		second := retry.WithObserver(func(_ context.Context, e retry.Event) { got = append(got, "second "+e.Action.String()) })

		f := &fakeRT{fn: func(n int, _ *http.Request) (*http.Response, error) {
			if n == 1 {
				return httpStatus(503), nil
			}
			return httpStatus(200), nil
		}}
		req, _ := http.NewRequest("GET", "http://svc/", nil)
		resp, err := retry.NewTransport(f, retry.WithBudget(nil), first, second).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := "first retry,second retry,first return,second return"
		if s := strings.Join(got, ","); s != want {
			t.Fatalf("HTTP observers saw %s; want %s", s, want)
		}

		got = nil
		calls := 0
		invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
			if calls++; calls == 1 {
				return status.Error(codes.Unavailable, "down")
			}
			return nil
		}
		if err := retry.UnaryClientInterceptor(retry.WithBudget(nil), first, second)(context.Background(), "/svc/M", nil, nil, nil, invoker); err != nil {
			t.Fatal(err)
		}
		if s := strings.Join(got, ","); s != want {
			t.Fatalf("gRPC observers saw %s; want %s", s, want)
		}
	})
}

// An observer runs on the caller's goroutine: its panic is the caller's, and goes
// through the layer unchanged, once the layer has disposed of the answer nobody gets.
func TestObserverPanicGoesThrough(t *testing.T) {
	type boom struct{}
	panics := retry.WithObserver(func(context.Context, retry.Event) { panic(boom{}) })
	recovered := func(f func()) (v any) {
		defer func() { v = recover() }()
		f()
		return nil
	}
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{fn: always(200)}
		req, _ := http.NewRequest("GET", "http://svc/", nil)
		v := recovered(func() {
			if resp, err := retry.NewTransport(f, panics).RoundTrip(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
		if v != (boom{}) {
			t.Fatalf("HTTP: recovered %#v; want the observer's panic", v)
		}
		if f.closed.Load() != 1 {
			t.Fatalf("%d bodies closed; want the answer nobody got closed", f.closed.Load())
		}
		invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
		v = recovered(func() {
			_ = retry.UnaryClientInterceptor(panics)(context.Background(), "/svc/M", nil, nil, nil, invoker)
		})
		if v != (boom{}) {
			t.Fatalf("gRPC: recovered %#v; want the observer's panic", v)
		}
	})
}

// When an observer panics on a traced HTTP call, the call's span, which the layer
// started, still ends (with an error), rather than being left open for ever.
func TestObserverPanicEndsCallSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	ctx, parent := tp.Tracer("test").Start(context.Background(), "handler")
	defer parent.End()
	panics := retry.WithObserver(func(context.Context, retry.Event) { panic("observer") })
	f := &fakeRT{fn: always(200)}
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://svc/", nil)
	func() {
		defer func() { _ = recover() }()
		if resp, err := retry.NewTransport(f, panics).RoundTrip(req); err == nil {
			resp.Body.Close()
		}
	}()
	var names []string
	for _, s := range rec.Ended() {
		names = append(names, s.Name())
	}
	if len(rec.Ended()) != 2 || rec.Ended()[1].Name() != "GET" || rec.Ended()[1].Status().Code != otelcodes.Error {
		t.Fatalf("ended spans %q; want the attempt's and the call's (GET, an error)", names)
	}
}

// The same on a gRPC call: its span ends an error, though the observer's panic goes
// through.
func TestObserverPanicEndsGRPCCallSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	ctx, parent := tp.Tracer("test").Start(context.Background(), "handler")
	defer parent.End()
	icpt := retry.UnaryClientInterceptor(retry.WithObserver(func(context.Context, retry.Event) { panic("observer") }))
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	func() {
		defer func() { _ = recover() }()
		_ = icpt(ctx, "/svc/M", nil, nil, nil, invoker)
	}()
	var names []string
	for _, s := range rec.Ended() {
		names = append(names, s.Name())
	}
	if len(rec.Ended()) != 2 || rec.Ended()[1].Name() != "Sent.svc.M" || rec.Ended()[1].Status().Code != otelcodes.Error {
		t.Fatalf("ended spans %q; want the attempt's and the call's (Sent.svc.M, an error)", names)
	}
}
