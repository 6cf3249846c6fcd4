package chaintest_test

// What every chain is built from: servers on loopback, the callers of them, and the
// span recorders the trace tests read. A fixture of one file (a chain of its own
// shape) stays in that file.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/dedup"
)

// hopMethod is the one method of hopService: google.protobuf.Empty both ways.
const hopMethod = "/stacktest.Hop/Work"

// hopService is a gRPC service of one method, hopMethod, registered by hand, whose
// handler is h: a hop that does h's work and answers h's error.
func hopService(h func(ctx context.Context) error) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "stacktest.Hop",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Work",
			Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
				in := new(emptypb.Empty)
				if err := dec(in); err != nil {
					return nil, err
				}
				call := func(ctx context.Context, _ any) (any, error) { return new(emptypb.Empty), h(ctx) }
				if icpt == nil {
					return call(ctx, in)
				}
				return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: hopMethod}, call)
			},
		}},
	}
}

// invoke calls hopMethod on conn.
func invoke(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
	return conn.Invoke(ctx, hopMethod, new(emptypb.Empty), new(emptypb.Empty), opts...)
}

// serveGRPC serves gs on a loopback port until the test ends and returns its
// address.
func serveGRPC(tb testing.TB, gs *grpc.Server) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go gs.Serve(lis)
	tb.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// serveHop serves hopService(h) on loopback, on a gRPC server with opts, and returns
// its address.
func serveHop(tb testing.TB, h func(ctx context.Context) error, opts ...grpc.ServerOption) string {
	tb.Helper()
	gs := grpc.NewServer(opts...)
	gs.RegisterService(hopService(h), nil)
	return serveGRPC(tb, gs)
}

// dial is a plaintext gRPC client of target with opts, closed when the test ends.
func dial(tb testing.TB, target string, opts ...grpc.DialOption) *grpc.ClientConn {
	tb.Helper()
	conn, err := grpc.NewClient(target, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

// stackClient is an HTTP client through the root stack's transport with opts, its
// idle connections closed when the test ends.
func stackClient(tb testing.TB, opts ...deadlinekit.Option) *http.Client {
	c := &http.Client{Transport: deadlinekit.NewTransport(nil, opts...)}
	tb.Cleanup(c.CloseIdleConnections)
	return c
}

// get sends a GET to url through c and returns the status, the body read and closed.
func get(ctx context.Context, c *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Body.Close()
}

// ledger is a payments service at the end of a chain: it counts charges, and
// declines the body "decline" (FailedPrecondition).
type ledger struct {
	testgrpc.UnimplementedTestServiceServer
	n atomic.Int32
}

func (l *ledger) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if string(req.GetPayload().GetBody()) == "decline" {
		return nil, status.Error(codes.FailedPrecondition, "card declined")
	}
	n := l.n.Add(1)
	return &testgrpc.SimpleResponse{Username: fmt.Sprint("charge ", n)}, nil
}

// serveLedger serves a ledger behind the server stack with dedup and returns it
// with its address.
func serveLedger(tb testing.TB) (*ledger, string) {
	led := &ledger{}
	gs := grpc.NewServer(deadlinekit.ServerOptions(deadlinekit.WithDedup(dedup.NewMemoryStore()))...)
	testgrpc.RegisterTestServiceServer(gs, led)
	return led, serveGRPC(tb, gs)
}

// recorder is a tracer provider whose ended spans rec holds, shut down when the
// test ends. Nothing global changes.
func recorder(tb testing.TB) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

// traced is recorder installed as the global tracer provider, with the W3C
// propagator, for one test.
func traced(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	oldTP, oldProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		otel.SetTracerProvider(oldTP)
		otel.SetTextMapPropagator(oldProp)
	})
	tp, rec := recorder(t)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return tp, rec
}

// value is the attribute k of s, if s has it.
func value(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// servers counts the server spans among spans.
func servers(spans []sdktrace.ReadOnlySpan) int {
	n := 0
	for _, s := range spans {
		if s.SpanKind() == trace.SpanKindServer {
			n++
		}
	}
	return n
}

// waitFor polls done until it holds, for 5 s at most: for what ends after the
// answer reached the caller (a server's span, a losing copy's).
func waitFor(done func() bool) {
	for wait := time.Now().Add(5 * time.Second); !done() && time.Now().Before(wait); {
		time.Sleep(time.Millisecond)
	}
}

// checkLeaks fails t if it leaves goroutines behind.
func checkLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}
