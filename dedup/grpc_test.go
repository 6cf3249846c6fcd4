package dedup_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/dedup"
)

type grpcCharges struct {
	testgrpc.UnimplementedTestServiceServer
	n    atomic.Int64
	gate chan struct{}
	ran  chan struct{}
	fail codes.Code // when set, the handler answers it
	// stallFirst: the first execution waits for its context to end, when that
	// context has a deadline less than a second away (a repeat with a long one, run
	// first on a machine too loaded for the short one to arrive, cannot hang).
	stallFirst bool
}

func (s *grpcCharges) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	n := s.n.Add(1)
	if s.ran != nil {
		s.ran <- struct{}{}
	}
	if d, ok := ctx.Deadline(); s.stallFirst && n == 1 && ok && time.Until(d) < time.Second {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-charge", strconv.FormatInt(n, 10)))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-ledger", "entry-"+strconv.FormatInt(n, 10)))
	if s.fail != codes.OK {
		return nil, status.Error(s.fail, "declined "+strconv.FormatInt(n, 10))
	}
	return &testgrpc.SimpleResponse{Username: "charge " + strconv.FormatInt(n, 10), OauthScope: string(req.GetPayload().GetBody())}, nil
}

func serveGRPC(t *testing.T, svc testgrpc.TestServiceServer, store dedup.Store, opts ...dedup.Option) testgrpc.TestServiceClient {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(dedup.UnaryServerInterceptor(store, opts...)))
	testgrpc.RegisterTestServiceServer(srv, svc)
	go srv.Serve(l)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(); srv.Stop() })
	return testgrpc.NewTestServiceClient(cc)
}

type grpcAnswer struct {
	resp            *testgrpc.SimpleResponse
	err             error
	header, trailer metadata.MD
	replayed        bool
}

func unary(ctx context.Context, c testgrpc.TestServiceClient, key, body string) grpcAnswer {
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
	}
	var a grpcAnswer
	a.resp, a.err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte(body)}}, grpc.Header(&a.header), grpc.Trailer(&a.trailer))
	a.replayed = len(a.header.Get("idempotent-replayed")) > 0
	return a
}

func TestGRPCRepeatsRunOnce(t *testing.T) {
	svc := &grpcCharges{}
	c := serveGRPC(t, svc, dedup.NewMemoryStore())
	ctx := context.Background()
	first := unary(ctx, c, "k", "100")
	if first.err != nil || first.replayed || first.resp.GetUsername() != "charge 1" {
		t.Fatalf("first: %+v", first)
	}
	for range 3 {
		a := unary(ctx, c, "k", "100")
		if a.err != nil || !a.replayed || a.resp.GetUsername() != "charge 1" || a.resp.GetOauthScope() != "100" ||
			a.header.Get("x-charge")[0] != "1" || a.trailer.Get("x-ledger")[0] != "entry-1" {
			t.Fatalf("repeat: %+v", a)
		}
	}
	if a := unary(ctx, c, "", "100"); a.err != nil || a.resp.GetUsername() != "charge 2" {
		t.Fatalf("no key: %+v", a)
	}
	if svc.n.Load() != 2 {
		t.Fatalf("ran %d times", svc.n.Load())
	}
}

func TestGRPCConcurrentRepeats(t *testing.T) {
	svc := &grpcCharges{gate: make(chan struct{}), ran: make(chan struct{}, 64)}
	c := serveGRPC(t, svc, dedup.NewMemoryStore())
	var wg sync.WaitGroup
	answers := make([]grpcAnswer, 50)
	for i := range answers {
		wg.Go(func() { answers[i] = unary(context.Background(), c, "k", "100") })
	}
	<-svc.ran
	close(svc.gate)
	wg.Wait()
	for _, a := range answers {
		if a.err != nil || a.resp.GetUsername() != "charge 1" {
			t.Fatalf("answer %+v", a)
		}
	}
	if svc.n.Load() != 1 {
		t.Fatalf("ran %d times, want 1", svc.n.Load())
	}
}

func TestGRPCErrorReplayed(t *testing.T) {
	svc := &grpcCharges{fail: codes.PermissionDenied}
	c := serveGRPC(t, svc, dedup.NewMemoryStore())
	a := unary(context.Background(), c, "k", "1")
	b := unary(context.Background(), c, "k", "1")
	if status.Code(a.err) != codes.PermissionDenied || status.Code(b.err) != codes.PermissionDenied ||
		status.Convert(b.err).Message() != "declined 1" || !b.replayed || svc.n.Load() != 1 {
		t.Fatalf("first %v, repeat %v (replayed %v), ran %d", a.err, b.err, b.replayed, svc.n.Load())
	}
}

func TestGRPCRefusals(t *testing.T) {
	svc := &grpcCharges{gate: make(chan struct{}), ran: make(chan struct{}, 4)}
	// The repeat beyond its budget waits 100 ms of its 500 and keeps 400 ms for its
	// Aborted to reach it, on a machine however loaded.
	c := serveGRPC(t, svc, dedup.NewMemoryStore(), dedup.WithFloor(400*time.Millisecond))
	if a := unary(context.Background(), c, strings.Repeat("k", 256), "1"); status.Code(a.err) != codes.InvalidArgument {
		t.Errorf("malformed key: %v", a.err)
	}
	done := make(chan grpcAnswer)
	go func() { done <- unary(context.Background(), c, "k", "1") }()
	<-svc.ran
	if a := unary(context.Background(), c, "k", "2"); status.Code(a.err) != codes.FailedPrecondition || !dedup.IsKeyReused(a.err) {
		t.Errorf("another message: %v, want FailedPrecondition with the key-reused ErrorInfo (an HTTP hop answers 422)", a.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	a := unary(ctx, c, "k", "1")
	if status.Code(a.err) != codes.Aborted {
		t.Errorf("repeat beyond its budget: %v, want Aborted", a.err)
	}
	if ms, err := strconv.Atoi(first(a.trailer.Get("grpc-retry-pushback-ms"))); err != nil || ms <= 0 || ms > 31000 {
		t.Errorf("pushback %v, want the first's time left", a.trailer.Get("grpc-retry-pushback-ms"))
	}
	close(svc.gate)
	if f := <-done; f.err != nil {
		t.Fatal(f.err)
	}
	if svc.n.Load() != 1 {
		t.Fatalf("ran %d times", svc.n.Load())
	}
}

func TestGRPCReleasedOnDeadline(t *testing.T) {
	svc := &grpcCharges{stallFirst: true}
	c := serveGRPC(t, svc, dedup.NewMemoryStore())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if a := unary(ctx, c, "k", "1"); status.Code(a.err) != codes.DeadlineExceeded {
		t.Fatalf("first: %v", a.err)
	}
	// The handler answered DeadlineExceeded: its key is released, and a repeat runs
	// (it may wait for the release).
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	a := unary(rctx, c, "k", "1")
	if a.err != nil || a.replayed || svc.n.Load() != 2 {
		t.Fatalf("repeat: %+v, ran %d", a, svc.n.Load())
	}
}

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

type forgetting struct {
	testgrpc.UnimplementedTestServiceServer
	n atomic.Int64
}

func (s *forgetting) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if s.n.Add(1) == 1 {
		dedup.Forget(ctx)
		return nil, status.Error(codes.Unavailable, "ledger down, nothing written")
	}
	return &testgrpc.SimpleResponse{Username: strings.Repeat("x", 100)}, nil
}

// TestGRPCForgetAndSizeLimit: after Forget a repeat runs; an answer above the size
// limit reaches its caller but is not kept, and a repeat gets AlreadyExists, not
// marked idempotent-replayed (it is not the stored answer).
func TestGRPCForgetAndSizeLimit(t *testing.T) {
	svc := &forgetting{}
	c := serveGRPC(t, svc, dedup.NewMemoryStore(), dedup.WithMaxResponseSize(50))
	ctx := context.Background()
	if a := unary(ctx, c, "k", "1"); status.Code(a.err) != codes.Unavailable {
		t.Fatalf("first: %v", a.err)
	}
	if a := unary(ctx, c, "k", "1"); a.err != nil || len(a.resp.GetUsername()) != 100 || a.replayed {
		t.Fatalf("after Forget: %+v", a)
	}
	a := unary(ctx, c, "k", "1")
	if status.Code(a.err) != codes.AlreadyExists || a.replayed || !strings.Contains(status.Convert(a.err).Message(), "not kept") {
		t.Fatalf("repeat of an answer too large to keep: %v (replayed %v)", a.err, a.replayed)
	}
	if svc.n.Load() != 2 {
		t.Fatalf("ran %d times, want 2", svc.n.Load())
	}
}
