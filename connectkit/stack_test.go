package connectkit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/otelattr"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// grpcStore serves pkg.Store/Get on grpc-go, behind the toolkit's server stack,
// with handle; it returns the URL of a loopback HTTP/2 server for it.
func grpcStore(t *testing.T, handle func(ctx context.Context, in *msg) (*msg, error)) string {
	t.Helper()
	gs := grpc.NewServer(deadlinekit.ServerOptions()...)
	gs.RegisterService(&grpc.ServiceDesc{
		ServiceName: "pkg.Store",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Get", Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(msg)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) { return handle(ctx, req.(*msg)) }
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: procGet}, h)
		}}},
	}, struct{}{})
	srv := httptest.NewUnstartedServer(gs)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(func() { srv.Close(); gs.Stop() })
	return srv.URL
}

// The budget decreases hop by hop through connect → grpc-go → connect, under each
// protocol for the last hop: each hop's stack keeps its reserve.
func TestChainConnectGRPCConnect(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			var atB, atC atomic.Int64
			urlC, hcC := serve(t, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
				d, _ := deadline.Remaining(ctx)
				atC.Store(int64(d))
				return connect.NewResponse(wrapperspb.String("c")), nil
			}, connectkit.HandlerOption())
			toC := client(hcC, urlC, procGet, p.opt, connectkit.ClientOption(deadlinekit.WithReserve(50*time.Millisecond)))
			urlB := grpcStore(t, func(ctx context.Context, in *msg) (*msg, error) {
				d, _ := deadline.Remaining(ctx)
				atB.Store(int64(d))
				resp, err := toC.CallUnary(ctx, connect.NewRequest(in))
				if err != nil {
					return nil, err
				}
				return resp.Msg, nil
			})
			hcB := &http.Client{Transport: hcC.Transport} // the same test CA trusts both
			toB := client(hcB, urlB, procGet, connect.WithGRPC(), connectkit.ClientOption(deadlinekit.WithReserve(50*time.Millisecond)))
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			resp, err := toB.CallUnary(ctx, connect.NewRequest(wrapperspb.String("a")))
			if err != nil {
				t.Fatal(err)
			}
			b, c := time.Duration(atB.Load()), time.Duration(atC.Load())
			if resp.Msg.GetValue() != "c" || b <= 0 || b > 950*time.Millisecond || c <= 0 || c > b-50*time.Millisecond {
				t.Errorf("B had %v, C had %v of the caller's 1 s; want each at least a 50 ms reserve below the last", b, c)
			}
		})
	}
}

// A handler whose own retries of a downstream failed tells its caller not to retry
// (grpc-retry-pushback-ms -1): a downstream in an outage gets 3 attempts, not 3 × 3.
func TestOneLayerRule(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			f := newFlaky(1000)
			urlC, hc := serve(t, f.handle, connectkit.HandlerOption())
			toC := client(hc, urlC, procGet, p.opt, connectkit.ClientOption(deadlinekit.WithRetry(fastBackoff)))
			urlB, _ := serve(t, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
				return toC.CallUnary(ctx, connect.NewRequest(req.Msg))
			}, connectkit.HandlerOption())
			toB := client(hc, urlB, procGet, p.opt, connectkit.ClientOption(deadlinekit.WithRetry(fastBackoff)))
			_, err := toB.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("a")))
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable || ce.Meta().Get("Grpc-Retry-Pushback-Ms") != "-1" {
				t.Fatalf("err = %v; want UNAVAILABLE with grpc-retry-pushback-ms -1", err)
			}
			if n := f.count(procGet); n != 3 {
				t.Errorf("the downstream got %d attempts; want 3", n)
			}
		})
	}
}

// A server's "come back in 150 ms" is waited, not the layer's own backoff.
func TestRetryHonoursPushback(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			var mu sync.Mutex
			var at []time.Time
			url, hc := serve(t, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
				mu.Lock()
				at = append(at, time.Now())
				n := len(at)
				mu.Unlock()
				if n == 1 {
					err := connect.NewError(connect.CodeUnavailable, errors.New("busy"))
					err.Meta().Set("Grpc-Retry-Pushback-Ms", "150")
					return nil, err
				}
				return ok(ctx, req)
			})
			c := client(hc, url, procGet, p.opt, connectkit.ClientOption(deadlinekit.WithRetry(fastBackoff)))
			if _, err := c.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("a"))); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(at) != 2 || at[1].Sub(at[0]) < 150*time.Millisecond {
				t.Errorf("%d attempts, the retry %v after the first; want 2, at least 150ms apart", len(at), at[len(at)-1].Sub(at[0]))
			}
		})
	}
}

// Under otelconnect, a retried call has one client span, otelconnect's, carrying the
// call's totals, with one attempt span per attempt under it, and the server span of
// each attempt under that attempt's span; no server span carries the totals.
func TestSpansUnderOtelconnect(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTextMapPropagator(propagation.TraceContext{}) // as a service sets it at start-up
	defer otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	otelServer, err := otelconnect.NewInterceptor(otelconnect.WithTracerProvider(tp), otelconnect.WithoutMetrics(), otelconnect.WithTrustRemote())
	if err != nil {
		t.Fatal(err)
	}
	otelClient, err := otelconnect.NewInterceptor(otelconnect.WithTracerProvider(tp), otelconnect.WithoutMetrics())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			rec.Reset()
			f := newFlaky(1)
			url, hc := serve(t, f.handle, connect.WithInterceptors(otelServer), connectkit.HandlerOption())
			c := client(hc, url, procGet, p.opt, connect.WithInterceptors(otelClient), connectkit.ClientOption(deadlinekit.WithRetry(fastBackoff)))
			if _, err := c.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("a"))); err != nil {
				t.Fatal(err)
			}
			var calls, attempts, servers []sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				switch {
				case s.SpanKind() == trace.SpanKindClient:
					calls = append(calls, s)
				case s.SpanKind() == trace.SpanKindServer:
					servers = append(servers, s)
				default:
					attempts = append(attempts, s)
				}
			}
			if len(calls) != 1 {
				t.Fatalf("%d client spans; want 1, otelconnect's", len(calls))
			}
			call := attribute.NewSet(calls[0].Attributes()...)
			if v, _ := call.Value(otelattr.AttemptsKey); v.AsInt64() != 2 {
				t.Errorf("the call span says %s=%v; want 2", otelattr.AttemptsKey, v.String())
			}
			if len(attempts) != 2 {
				t.Errorf("%d attempt spans; want 2", len(attempts))
			}
			for _, a := range attempts {
				if a.Parent().SpanID() != calls[0].SpanContext().SpanID() {
					t.Errorf("attempt span %q is not a child of the call span", a.Name())
				}
			}
			if len(servers) != 2 {
				t.Errorf("%d server spans; want one per attempt, 2", len(servers))
			}
			for i, s := range servers {
				if i < len(attempts) && s.Parent().SpanID() != attempts[0].SpanContext().SpanID() && s.Parent().SpanID() != attempts[1].SpanContext().SpanID() {
					t.Errorf("server span %d is not a child of an attempt span", i)
				}
				if set := attribute.NewSet(s.Attributes()...); set.HasValue(otelattr.AttemptsKey) {
					t.Errorf("server span %q carries the call's attempts", s.Name())
				}
			}
		})
	}
}

// A server stream gets the caller's budget less the reserve; the guard refuses one
// below its floor before its handler runs.
func TestStreams(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			var left atomic.Int64
			var ran atomic.Int32
			mux := http.NewServeMux()
			mux.Handle("/pkg.Store/Watch", connect.NewServerStreamHandler("/pkg.Store/Watch",
				func(ctx context.Context, req *connect.Request[msg], s *connect.ServerStream[msg]) error {
					ran.Add(1)
					d, _ := deadline.Remaining(ctx)
					left.Store(int64(d))
					return s.Send(wrapperspb.String("tick"))
				}, connectkit.HandlerOption(deadlinekit.WithShortCircuit(shortcircuit.WithFloor(200*time.Millisecond)))))
			srv := httptest.NewUnstartedServer(mux)
			srv.EnableHTTP2 = true
			srv.StartTLS()
			defer srv.Close()
			c := connect.NewClient[msg, msg](srv.Client(), srv.URL+"/pkg.Store/Watch", p.opt, connectkit.ClientOption(deadlinekit.WithReserve(100*time.Millisecond)))

			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			st, err := c.CallServerStream(ctx, connect.NewRequest(wrapperspb.String("a")))
			if err != nil {
				t.Fatal(err)
			}
			for st.Receive() {
			}
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
			st.Close()
			if d := time.Duration(left.Load()); d <= 0 || d > 900*time.Millisecond {
				t.Errorf("the stream's handler had %v; want below 900ms (1 s less the 100 ms reserve)", d)
			}

			ctx, cancel = context.WithTimeout(context.Background(), 250*time.Millisecond)
			defer cancel()
			ran.Store(0)
			st, err = c.CallServerStream(ctx, connect.NewRequest(wrapperspb.String("a")))
			if err == nil {
				for st.Receive() {
				}
				err = st.Err()
				st.Close()
			}
			if connect.CodeOf(err) != connect.CodeDeadlineExceeded || ran.Load() != 0 {
				t.Errorf("a stream with 150 ms left for a 200 ms floor: %v, handler ran %d times; want DeadlineExceeded, not run", err, ran.Load())
			}
		})
	}
}

// A dead stream handler opens the circuit its unary calls share; a refused stream
// sends nothing and fails with breaker.ErrOpen.
func TestBreakerStreams(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			var opened atomic.Int32
			mux := http.NewServeMux()
			mux.Handle("/pkg.Store/Watch", connect.NewServerStreamHandler("/pkg.Store/Watch",
				func(ctx context.Context, req *connect.Request[msg], s *connect.ServerStream[msg]) error {
					opened.Add(1)
					return connect.NewError(connect.CodeUnavailable, errors.New("down"))
				}))
			srv := httptest.NewUnstartedServer(mux)
			srv.EnableHTTP2 = true
			srv.StartTLS()
			defer srv.Close()
			b := breaker.New(breaker.WithConsecutiveFailures(5))
			c := connect.NewClient[msg, msg](srv.Client(), srv.URL+"/pkg.Store/Watch", p.opt, connectkit.ClientOption(deadlinekit.WithSharedBreaker(b)))
			watch := func() error {
				st, err := c.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("a")))
				if err != nil {
					return err
				}
				defer st.Close()
				for st.Receive() {
				}
				return st.Err()
			}
			for range 5 {
				if err := watch(); connect.CodeOf(err) != connect.CodeUnavailable {
					t.Fatalf("err = %v; want UNAVAILABLE", err)
				}
			}
			n := opened.Load()
			if err := watch(); !errors.Is(err, breaker.ErrOpen) || connect.CodeOf(err) != connect.CodeUnavailable {
				t.Fatalf("err = %v; want UNAVAILABLE matching breaker.ErrOpen", err)
			}
			if opened.Load() != n {
				t.Error("the refused stream reached the server")
			}
		})
	}
}
