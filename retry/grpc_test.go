package retry_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/deadlinekit/deadlinekit/retry"
)

// testServer answers UnaryCall with fn(attempt number, incoming metadata).
type testServer struct {
	testgrpc.UnimplementedTestServiceServer
	mu   sync.Mutex
	n    int
	md   []metadata.MD
	fn   func(ctx context.Context, n int) error
	next testgrpc.TestServiceClient // when set, the handler calls it (a middle layer)
}

func (s *testServer) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	s.n++
	n := s.n
	s.md = append(s.md, md)
	s.mu.Unlock()
	if s.next != nil {
		if _, err := s.next.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
			return nil, status.Error(codes.Unavailable, "downstream: "+status.Convert(err).Message())
		}
		return &testgrpc.SimpleResponse{}, nil
	}
	if s.fn != nil {
		if err := s.fn(ctx, n); err != nil {
			return nil, err
		}
	}
	return &testgrpc.SimpleResponse{}, nil
}

func (s *testServer) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// serveGRPC starts s on loopback with the given server options and returns a client
// connection with the given client options.
func serveGRPC(t *testing.T, s *testServer, sopts []grpc.ServerOption, copts ...grpc.DialOption) testgrpc.TestServiceClient {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(sopts...)
	testgrpc.RegisterTestServiceServer(srv, s)
	go srv.Serve(l)
	cc, err := grpc.NewClient(l.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, copts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		srv.Stop()
	})
	return testgrpc.NewTestServiceClient(cc)
}

func withRetryInfo(t *testing.T, code codes.Code, d *durationpb.Duration) error {
	st, err := status.New(code, "slow down").WithDetails(&errdetails.RetryInfo{RetryDelay: d})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

func TestGRPCClassification(t *testing.T) {
	cases := []struct {
		name     string
		err      func(ctx context.Context) error
		opts     []retry.Option
		attempts int
		code     codes.Code
	}{
		{"UNAVAILABLE, idempotent method", func(context.Context) error { return status.Error(codes.Unavailable, "x") }, []retry.Option{idem}, 3, codes.Unavailable},
		{"UNAVAILABLE, keyed call", func(context.Context) error { return status.Error(codes.Unavailable, "x") }, []retry.Option{retry.WithIdempotencyKeys(nil)}, 3, codes.Unavailable},
		{"UNAVAILABLE from the server, neither idempotent nor keyed", func(context.Context) error { return status.Error(codes.Unavailable, "x") }, nil, 1, codes.Unavailable},
		{"RESOURCE_EXHAUSTED with RetryInfo", func(context.Context) error {
			return withRetryInfo(t, codes.ResourceExhausted, durationpb.New(5*time.Millisecond))
		}, nil, 3, codes.ResourceExhausted},
		{"RESOURCE_EXHAUSTED without RetryInfo", func(context.Context) error { return status.Error(codes.ResourceExhausted, "quota") }, nil, 1, codes.ResourceExhausted},
		{"RESOURCE_EXHAUSTED with negative RetryInfo", func(context.Context) error {
			return withRetryInfo(t, codes.ResourceExhausted, &durationpb.Duration{Seconds: -1})
		}, nil, 1, codes.ResourceExhausted},
		{"ABORTED", func(context.Context) error { return status.Error(codes.Aborted, "x") }, nil, 1, codes.Aborted},
		{"NOT_FOUND", func(context.Context) error { return status.Error(codes.NotFound, "x") }, nil, 1, codes.NotFound},
		{"INVALID_ARGUMENT", func(context.Context) error { return status.Error(codes.InvalidArgument, "x") }, nil, 1, codes.InvalidArgument},
		{"PERMISSION_DENIED", func(context.Context) error { return status.Error(codes.PermissionDenied, "x") }, nil, 1, codes.PermissionDenied},
		{"UNAUTHENTICATED", func(context.Context) error { return status.Error(codes.Unauthenticated, "x") }, nil, 1, codes.Unauthenticated},
		{"UNIMPLEMENTED", func(context.Context) error { return status.Error(codes.Unimplemented, "x") }, nil, 1, codes.Unimplemented},
		{"INTERNAL", func(context.Context) error { return status.Error(codes.Internal, "x") }, nil, 1, codes.Internal},
		{"DEADLINE_EXCEEDED from the server", func(context.Context) error { return status.Error(codes.DeadlineExceeded, "x") }, nil, 1, codes.DeadlineExceeded},
		{"DEADLINE_EXCEEDED, per-attempt timeout fired, idempotent method", func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}, []retry.Option{retry.WithAttemptTimeout(50 * time.Millisecond), retry.WithIdempotentMethods("/grpc.testing.TestService/UnaryCall")}, 3, codes.DeadlineExceeded},
		{"DEADLINE_EXCEEDED, per-attempt timeout fired, keyed call", func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}, []retry.Option{retry.WithAttemptTimeout(50 * time.Millisecond), retry.WithIdempotencyKeys(nil)}, 3, codes.DeadlineExceeded},
		{"DEADLINE_EXCEEDED, per-attempt timeout fired, neither idempotent nor keyed", func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}, []retry.Option{retry.WithAttemptTimeout(50 * time.Millisecond)}, 1, codes.DeadlineExceeded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &testServer{fn: func(ctx context.Context, _ int) error { return c.err(ctx) }}
			var attempts atomic.Int32
			opts := append([]retry.Option{fast, retry.WithBudget(nil),
				retry.WithObserver(func(context.Context, retry.Event) { attempts.Add(1) })}, c.opts...)
			client := serveGRPC(t, s, nil, grpc.WithUnaryInterceptor(retry.UnaryClientInterceptor(opts...)))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
			if got := status.Code(err); got != c.code {
				t.Fatalf("code %v (%v); want %v", got, err, c.code)
			}
			// Counted on the client: an attempt whose per-attempt timeout fires may
			// never reach the server on a loaded machine.
			if int(attempts.Load()) != c.attempts {
				t.Fatalf("%d attempts; want %d", attempts.Load(), c.attempts)
			}
		})
	}
}

func TestGRPCMetadataAndKey(t *testing.T) {
	s := &testServer{fn: func(_ context.Context, n int) error {
		if n < 3 {
			return status.Error(codes.Unavailable, "x")
		}
		return nil
	}}
	var events []retry.Event
	client := serveGRPC(t, s, nil, grpc.WithUnaryInterceptor(retry.UnaryClientInterceptor(fast, retry.WithBudget(nil), retry.WithIdempotencyKeys(nil),
		retry.WithObserver(func(_ context.Context, e retry.Event) { events = append(events, e) }))))
	if _, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	key := s.md[0].Get("idempotency-key")
	if len(key) != 1 || len(key[0]) != 36 {
		t.Fatalf("idempotency-key %q", key)
	}
	for i, md := range s.md {
		if got := md.Get("idempotency-key"); len(got) != 1 || got[0] != key[0] {
			t.Fatalf("attempt %d key %q; want %q", i+1, got, key)
		}
		prev := md.Get("grpc-previous-rpc-attempts")
		if i == 0 && len(prev) != 0 || i > 0 && (len(prev) != 1 || prev[0] != string(rune('0'+i))) {
			t.Fatalf("attempt %d grpc-previous-rpc-attempts %q", i+1, prev)
		}
	}
	if len(events) != 3 || events[2].Attempt != 3 || events[2].Action != retry.Return {
		t.Fatalf("events %+v", events)
	}
	// A caller's key is kept.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", "mine")
	s.n, s.md = 0, nil
	if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	for i, md := range s.md {
		if got := md.Get("idempotency-key"); len(got) != 1 || got[0] != "mine" {
			t.Fatalf("attempt %d key %q; want the caller's", i+1, got)
		}
	}
	// A blank key is no key: it is replaced, and every attempt carries the new one
	// alone.
	ctx = metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", " ")
	s.n, s.md = 0, nil
	if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	key = s.md[0].Get("idempotency-key")
	if len(key) != 1 || len(key[0]) != 36 {
		t.Fatalf("blank key replaced by %q; want one generated key", key)
	}
	for i, md := range s.md {
		if got := md.Get("idempotency-key"); len(got) != 1 || got[0] != key[0] {
			t.Fatalf("attempt %d key %q; want %q", i+1, got, key)
		}
	}
}

func TestGRPCPushback(t *testing.T) {
	cases := []struct {
		name     string
		trailer  string
		timeout  time.Duration
		attempts int
		code     codes.Code
	}{
		{"pushback 30ms", "30", 2 * time.Second, 3, codes.Unavailable},
		{"pushback -1: do not retry", "-1", 2 * time.Second, 1, codes.Unavailable},
		{"pushback malformed", "soon", 2 * time.Second, 1, codes.Unavailable},
		{"pushback past the deadline", "5000", 500 * time.Millisecond, 1, codes.DeadlineExceeded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &testServer{fn: func(ctx context.Context, _ int) error {
				grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", c.trailer))
				return status.Error(codes.Unavailable, "busy")
			}}
			client := serveGRPC(t, s, nil, grpc.WithUnaryInterceptor(retry.UnaryClientInterceptor(fast, idem, retry.WithBudget(nil))))
			ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
			defer cancel()
			start := time.Now()
			_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
			if status.Code(err) != c.code || s.calls() != c.attempts {
				t.Fatalf("%v after %d attempts; want %v after %d", err, s.calls(), c.code, c.attempts)
			}
			if c.attempts == 3 && time.Since(start) < 60*time.Millisecond {
				t.Fatalf("took %v; want ≥ 2 × 30 ms of pushback", time.Since(start))
			}
			if c.code == codes.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err %v does not match context.DeadlineExceeded", err)
			}
		})
	}
}

func TestGRPCBudgetExhaustedKeepsCode(t *testing.T) {
	s := &testServer{fn: func(context.Context, int) error { return status.Error(codes.Unavailable, "down") }}
	client := serveGRPC(t, s, nil, grpc.WithUnaryInterceptor(retry.UnaryClientInterceptor(fast, idem, retry.WithBudget(retry.NewBudget(0, 0, time.Second)))))
	_, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{})
	if status.Code(err) != codes.Unavailable || !errors.Is(err, retry.ErrBudgetExhausted) || s.calls() != 1 {
		t.Fatalf("%v after %d calls; want UNAVAILABLE + ErrBudgetExhausted after 1", err, s.calls())
	}
	t.Logf("error: %v", err)
}

func TestGRPCServerInterceptorOneLayer(t *testing.T) {
	bottom := &testServer{fn: func(context.Context, int) error { return status.Error(codes.Unavailable, "down") }}
	bottomClient := serveGRPC(t, bottom, nil, grpc.WithUnaryInterceptor(retry.UnaryClientInterceptor(fast, idem, retry.WithBudget(nil))))
	middle := &testServer{next: bottomClient}
	client := serveGRPC(t, middle, []grpc.ServerOption{grpc.UnaryInterceptor(retry.UnaryServerInterceptor())},
		grpc.WithUnaryInterceptor(retry.UnaryClientInterceptor(fast, idem, retry.WithBudget(nil))))
	_, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("err %v", err)
	}
	if middle.calls() != 1 || bottom.calls() != 3 {
		t.Fatalf("middle saw %d, bottom %d; want 1 and 3 (the middle's pushback -1 stops the top)", middle.calls(), bottom.calls())
	}
	// A call that is itself a retry attempt: the middle makes one attempt.
	bottom.n, middle.n = 0, 0
	ctx := metadata.AppendToOutgoingContext(context.Background(), "grpc-previous-rpc-attempts", "1")
	plain := serveGRPC(t, middle, []grpc.ServerOption{grpc.UnaryInterceptor(retry.UnaryServerInterceptor())})
	_, _ = plain.UnaryCall(ctx, &testgrpc.SimpleRequest{})
	if bottom.calls() != 1 {
		t.Fatalf("serving a retry attempt, the middle made %d calls; want 1", bottom.calls())
	}
}

// naiveUnary is what each layer does without the toolkit: up to 3 attempts on any
// error, at once.
func naiveUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var err error
	for range 3 {
		if err = invoker(ctx, method, req, reply, cc, opts...); err == nil {
			return nil
		}
	}
	return err
}

// TestGRPCAmplification: user → L1 → L2 → bottom over gRPC on loopback, bottom down.
func TestGRPCAmplification(t *testing.T) {
	const requests = 10
	for _, toolkit := range []bool{false, true} {
		client := func() grpc.DialOption {
			if toolkit {
				return grpc.WithUnaryInterceptor(retry.UnaryClientInterceptor())
			}
			return grpc.WithUnaryInterceptor(naiveUnary)
		}
		var sopts []grpc.ServerOption
		if toolkit {
			sopts = []grpc.ServerOption{grpc.UnaryInterceptor(retry.UnaryServerInterceptor())}
		}
		bottom := &testServer{fn: func(context.Context, int) error { return status.Error(codes.Unavailable, "down") }}
		l2 := &testServer{next: serveGRPC(t, bottom, sopts, client())}
		l1 := &testServer{next: serveGRPC(t, l2, sopts, client())}
		user := serveGRPC(t, l1, sopts, client())
		start := time.Now()
		for range requests {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if _, err := user.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err == nil {
				t.Fatal("a call through a down bottom succeeded")
			}
			cancel()
		}
		per := float64(bottom.calls()) / requests
		name := "without toolkit (each layer retries 3×)"
		if toolkit {
			name = "with deadlinekit retry (default options)"
		}
		t.Logf("gRPC 3-layer chain, bottom down, %s: %.1f calls reach the bottom per user request; mean time to fail %v",
			name, per, (time.Since(start) / requests).Round(10*time.Microsecond))
		if !toolkit && per != 27 || toolkit && per > 3 {
			t.Errorf("%s: %.1f per request", name, per)
		}
	}
}

// A wait ends at once when the caller cancels; the code says so.
func TestGRPCCancelDuringWait(t *testing.T) {
	s := &testServer{fn: func(context.Context, int) error { return status.Error(codes.Unavailable, "down") }}
	client := serveGRPC(t, s, nil, grpc.WithUnaryInterceptor(retry.UnaryClientInterceptor(
		idem, retry.WithBudget(nil), retry.WithBackoff(retry.Backoff{Base: 10 * time.Second}))))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
	if status.Code(err) != codes.Canceled || !errors.Is(err, context.Canceled) || !errors.As(err, new(*retry.StopError)) {
		t.Fatalf("err %v; want CANCELED", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %v; want the wait to end with the context", took)
	}
}

// A handler that forwards its incoming metadata forwards its caller's attempt count;
// each attempt still sends one value, its own.
func TestGRPCForwardedAttemptCount(t *testing.T) {
	var seen [][]string
	var mu sync.Mutex
	s := &testServer{fn: func(ctx context.Context, n int) error {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		seen = append(seen, md.Get("grpc-previous-rpc-attempts"))
		mu.Unlock()
		if n == 1 {
			return status.Error(codes.Unavailable, "busy")
		}
		return nil
	}}
	client := serveGRPC(t, s, nil, grpc.WithUnaryInterceptor(retry.UnaryClientInterceptor(fast, idem, retry.WithBudget(nil))))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ctx = metadata.NewOutgoingContext(ctx, metadata.Pairs("grpc-previous-rpc-attempts", "2"))
	if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || len(seen[0]) != 0 || !slices.Equal(seen[1], []string{"1"}) {
		t.Errorf("the server saw grpc-previous-rpc-attempts %q; want [] then [1]", seen)
	}
}
