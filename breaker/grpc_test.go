package breaker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
)

type grpcBackend struct {
	testgrpc.UnimplementedTestServiceServer
	failing atomic.Bool
	hang    atomic.Bool
	hits    atomic.Int64
}

func (s *grpcBackend) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.hits.Add(1)
	if s.hang.Load() {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if s.failing.Load() {
		return nil, status.Error(codes.Unavailable, "down")
	}
	return &testgrpc.SimpleResponse{}, nil
}

func (s *grpcBackend) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, st testgrpc.TestService_StreamingOutputCallServer) error {
	s.hits.Add(1)
	if s.failing.Load() {
		return status.Error(codes.Unavailable, "down")
	}
	return st.Send(&testgrpc.StreamingOutputCallResponse{})
}

// serveGRPC starts a loopback server of s and returns a client through b.
func serveGRPC(t *testing.T, s *grpcBackend, b *breaker.Breaker) (testgrpc.TestServiceClient, string) {
	addr := listenGRPC(t, s)
	return dialGRPC(t, addr, b), addr
}

func dialGRPC(t *testing.T, addr string, b *breaker.Breaker) testgrpc.TestServiceClient {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(b.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(b.StreamClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

func TestGRPCOutageOpensAndRecoveryCloses(t *testing.T) {
	s := &grpcBackend{}
	b := breaker.New(short, breaker.WithProbes(1))
	client, addr := serveGRPC(t, s, b)
	ctx := context.Background()
	s.failing.Store(true)
	for i := range breaker.DefaultMinCalls {
		if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); status.Code(err) != codes.Unavailable || errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("failure %d: %v", i+1, err)
		}
	}
	hits := s.hits.Load()
	var trailer metadata.MD
	_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Trailer(&trailer))
	var oe *breaker.OpenError
	if !errors.Is(err, breaker.ErrOpen) || !errors.As(err, &oe) || oe.Target != addr || status.Code(err) != codes.Unavailable {
		t.Fatalf("refused: %v", err)
	}
	if v, ok := pushback.Of(err); !ok || v != oe.PushbackMs() || v == "0" {
		t.Fatalf("pushback on the error: %q %v, want %s", v, ok, oe.PushbackMs())
	}
	if got := trailer.Get(pushback.Key); len(got) != 1 || got[0] != oe.PushbackMs() {
		t.Fatalf("trailer option: %v", trailer)
	}
	for range 50 {
		if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("while open: %v", err)
		}
	}
	// A stream is refused too.
	if st, err := client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{}); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("stream while open: %v %v", st, err)
	}
	if got := s.hits.Load(); got != hits {
		t.Fatalf("%d calls reached the server while open", got-hits)
	}
	s.failing.Store(false)
	waitSleep()
	for i := range 30 {
		if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
			t.Fatalf("after recovery, call %d: %v", i+1, err)
		}
	}
	if st := b.State(addr); st != breaker.Closed {
		t.Fatalf("after recovery: %v", st)
	}
}

func TestGRPCStreamsCount(t *testing.T) {
	s := &grpcBackend{}
	b := breaker.New(breaker.WithMinCalls(5))
	client, addr := serveGRPC(t, s, b)
	recv := func() error {
		st, err := client.StreamingOutputCall(context.Background(), &testgrpc.StreamingOutputCallRequest{})
		if err != nil {
			return err
		}
		for {
			if _, err := st.Recv(); err != nil {
				return err
			}
		}
	}
	for range 10 {
		recv()
	}
	if got := b.Stats(); got.Successes != 10 {
		t.Fatalf("healthy streams: %+v", got)
	}
	s.failing.Store(true)
	for range 16 { // 16 of 26 fail: above 60%
		recv()
	}
	if err := recv(); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("after failing streams: %v (%v)", err, b.State(addr))
	}
}

func TestGRPCCancellationsAndStarvedCallsNeverOpen(t *testing.T) {
	s := &grpcBackend{}
	b := breaker.New(breaker.WithMinCalls(5))
	client, addr := serveGRPC(t, s, b)
	for range 20 { // the typical latency: a fraction of a millisecond
		if _, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	s.hang.Store(true)
	testkit.Parallel(20, 300, func(i int) {
		ctx, cancel := context.WithCancel(context.Background())
		if i%2 == 1 { // an expired budget: below anything the target needs
			ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		} else {
			time.AfterFunc(time.Millisecond, cancel)
		}
		defer cancel()
		_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		if c := status.Code(err); c != codes.Canceled && c != codes.DeadlineExceeded {
			t.Errorf("call %d: %v", i, err)
		}
	})
	if st := b.Stats(); st.Neutral != 300 || st.Failures != 0 || b.State(addr) != breaker.Closed {
		t.Fatalf("after 300 cancelled or starved calls: %+v", st)
	}
}

func TestGRPCDeadTargetDoesNotDisturbAHealthyOne(t *testing.T) {
	s := &grpcBackend{}
	b := breaker.New(breaker.WithOpenFor(time.Minute))
	healthy, addr := serveGRPC(t, s, b)
	dead := dialGRPC(t, testkit.ClosedAddr(t), b)
	refused := 0
	for range 100 {
		if _, err := dead.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}); errors.Is(err, breaker.ErrOpen) {
			refused++
		} else if status.Code(err) != codes.Unavailable {
			t.Fatalf("dead target: %v", err)
		}
		if _, err := healthy.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}); err != nil {
			t.Fatalf("healthy target: %v", err)
		}
	}
	if refused != 100-breaker.DefaultMinCalls || b.State(addr) != breaker.Closed {
		t.Fatalf("refused %d calls to the dead target; healthy %v; %+v", refused, b.State(addr), b.Stats())
	}
}
