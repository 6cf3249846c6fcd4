package breaker_test

import (
	"context"
	"errors"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// guardedGRPC is a target behind the toolkit's guard, which takes one UnaryCall at
// a time and queues none: a UnaryCall asking for a response of size 1 holds the
// slot until its caller leaves (entered is closed once it does), and every other
// UnaryCall is then refused at once for load, as an overloaded guard refuses over
// gRPC: RESOURCE_EXHAUSTED with RetryInfo, the gRPC form of its 503 with
// Retry-After. EmptyCall, unguarded, waits until its caller gives up.
type guardedGRPC struct {
	overloadedGRPC
	entered chan struct{}
}

func (s *guardedGRPC) UnaryCall(ctx context.Context, r *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if r.GetResponseSize() == 1 {
		close(s.entered)
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &testgrpc.SimpleResponse{}, nil
}

// A gRPC target that refuses calls for load while it lets others wait is up, as
// it is over HTTP (TestHTTPOverloadedTargetRefusingForLoadStaysClosed): the
// timeouts of the calls it let wait, of the same level as those it refused, are
// not its failure.
func TestGRPCOverloadedTargetRefusingForLoadStaysClosed(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	guard := shortcircuit.UnaryServerInterceptor(shortcircuit.WithMaxConcurrency(1), shortcircuit.WithQueue(0, shortcircuit.FIFO))
	gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod == testgrpc.TestService_UnaryCall_FullMethodName {
			return guard(ctx, req, info, handler)
		}
		return handler(ctx, req)
	}))
	s := &guardedGRPC{entered: make(chan struct{})}
	testgrpc.RegisterTestServiceServer(gs, s)
	go gs.Serve(lis)
	defer gs.Stop()
	addr := lis.Addr().String()

	h := newHeld()
	b, client := holdingGRPCClient(t, addr, h, func(_ context.Context, method string) bool {
		return method == testgrpc.TestService_EmptyCall_FullMethodName
	})
	ctx := criticality.With(bg, criticality.Sheddable)
	if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
		t.Fatal(err) // the slot free
	}
	blockCtx, unblock := context.WithCancel(ctx)
	blocked := make(chan struct{})
	go func() {
		defer close(blocked)
		_, _ = client.UnaryCall(blockCtx, &testgrpc.SimpleRequest{ResponseSize: 1})
	}()
	defer func() { unblock(); <-blocked }()
	<-s.entered
	refused := func() error { // the slot held: refused for load, at once
		_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		if status.Code(err) == codes.ResourceExhausted {
			return nil
		}
		return errors.Join(errors.New("want RESOURCE_EXHAUSTED"), err)
	}
	wait := func(ctx context.Context) error {
		_, err := client.EmptyCall(ctx, &testgrpc.Empty{})
		return err
	}
	for _, err := range h.burst(t, criticality.Sheddable, wait, refused) {
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("waiting call: %v, want DEADLINE_EXCEEDED", err)
		}
	}
	if st := b.Stats(); st.Failures != 0 || st.Opens != 0 || b.State(addr) != breaker.Closed {
		t.Fatalf("after %d timeouts of a target refusing the same level's calls for load: %+v, %v", sheddableCalls, st, b.State(addr))
	}
}
