package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
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
	"google.golang.org/protobuf/proto"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// funcService answers UnaryCall with its function, counting the executions.
type funcService struct {
	testgrpc.UnimplementedTestServiceServer
	n  atomic.Int64
	do func(ctx context.Context, n int64) (*testgrpc.SimpleResponse, error)
}

func (s *funcService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return s.do(ctx, s.n.Add(1))
}

// serveStack is serveGRPC through the whole server stack
// (deadlinekit.ServerOptions with WithDedup).
func serveStack(t *testing.T, svc testgrpc.TestServiceServer, store dedup.Store, opts ...dedup.Option) testgrpc.TestServiceClient {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(deadlinekit.ServerOptions(deadlinekit.WithDedup(store, opts...))...)
	testgrpc.RegisterTestServiceServer(srv, svc)
	go srv.Serve(l)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(); srv.Stop() })
	return testgrpc.NewTestServiceClient(cc)
}

// TestGRPCUnmarshallableAnswerReplayed: a response grpc-go cannot marshal (a proto3
// string that is not UTF-8) reaches its caller as grpc-go's Internal status; the
// handler ran, so that answer is stored, and a repeat gets the same status, header
// and trailer instead of waiting on a key left leased and then running again.
func TestGRPCUnmarshallableAnswerReplayed(t *testing.T) {
	svc := &funcService{do: func(ctx context.Context, n int64) (*testgrpc.SimpleResponse, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-charge", strconv.FormatInt(n, 10)))
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-ledger", "entry-"+strconv.FormatInt(n, 10)))
		return &testgrpc.SimpleResponse{Username: "charge \xff"}, nil
	}}
	c := serveGRPC(t, svc, dedup.NewMemoryStore())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	f := unary(context.Background(), c, "k", "1")
	if status.Code(f.err) != codes.Internal || first(f.header.Get("x-charge")) != "1" || first(f.trailer.Get("x-ledger")) != "entry-1" {
		t.Fatalf("first: %v header %v trailer %v", f.err, f.header, f.trailer)
	}
	for range 2 {
		a := unary(ctx, c, "k", "1")
		if status.Code(a.err) != codes.Internal || status.Convert(a.err).Message() != status.Convert(f.err).Message() || !a.replayed ||
			first(a.header.Get("x-charge")) != "1" || first(a.trailer.Get("x-ledger")) != "entry-1" {
			t.Fatalf("repeat: %v (replayed %v) header %v trailer %v; first: %v", a.err, a.replayed, a.header, a.trailer, f.err)
		}
	}
	if svc.n.Load() != 1 {
		t.Fatalf("ran %d times, want 1", svc.n.Load())
	}
}

// timedOut waits for a deadline of ctx's child to pass and returns its error, a
// plain context.DeadlineExceeded: a handler whose own step ran out of time.
func timedOut(ctx context.Context) error {
	tctx, cancel := context.WithTimeout(ctx, time.Microsecond)
	defer cancel()
	<-tctx.Done()
	return tctx.Err()
}

// budgetFailure is a handler that gives up for lack of time, or because its caller
// left, with a plain Go error (no gRPC code).
type budgetFailure struct {
	name string
	// fail is the first execution's error; it closes running once it runs.
	fail func(ctx context.Context, running chan<- struct{}) error
	// callerLeaves: the first caller cancels its call once the handler runs.
	callerLeaves bool
}

var budgetFailures = []budgetFailure{
	{name: "deadline ctx.Err", fail: func(ctx context.Context, _ chan<- struct{}) error { return timedOut(ctx) }},
	{name: "wrapped ctx.Err", fail: func(ctx context.Context, _ chan<- struct{}) error { return fmt.Errorf("ledger: %w", timedOut(ctx)) }},
	{name: "caller left", callerLeaves: true, fail: func(ctx context.Context, running chan<- struct{}) error {
		close(running)
		<-ctx.Done()
		return ctx.Err()
	}},
	{name: "context.Canceled", fail: func(context.Context, chan<- struct{}) error { return context.Canceled }},
	{name: "shortcircuit.Check", fail: func(ctx context.Context, _ chan<- struct{}) error { return shortcircuit.Check(ctx, time.Hour) }},
	{name: "budget sentinel", fail: func(context.Context, chan<- struct{}) error {
		return fmt.Errorf("ledger: %w", deadline.ErrInsufficientBudget)
	}},
}

// TestGRPCBudgetErrorsRelease: a handler that gives up for lack of time, or because
// its caller left, with a plain Go error (ctx.Err(), shortcircuit.Check's refusal,
// the budget sentinel wrapped), which grpc-go and the stack answer DeadlineExceeded
// or Canceled: its key is released and a repeat runs, rather than getting a stored
// UNKNOWN for the retention.
func TestGRPCBudgetErrorsRelease(t *testing.T) {
	for _, stack := range []string{"interceptor", "stack"} {
		for _, tc := range budgetFailures {
			t.Run(stack+"/"+tc.name, func(t *testing.T) {
				running := make(chan struct{})
				svc := &funcService{do: func(ctx context.Context, n int64) (*testgrpc.SimpleResponse, error) {
					if n == 1 {
						return nil, tc.fail(ctx, running)
					}
					return &testgrpc.SimpleResponse{Username: "charge " + strconv.FormatInt(n, 10)}, nil
				}}
				serve := serveGRPC
				if stack == "stack" {
					serve = serveStack
				}
				c := serve(t, svc, dedup.NewMemoryStore())
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if tc.callerLeaves {
					go func() { <-running; cancel() }()
				}
				f := unary(ctx, c, "k", "1")
				if f.err == nil || svc.n.Load() != 1 {
					t.Fatalf("first: %v, ran %d", f.err, svc.n.Load())
				}
				a := unary(context.Background(), c, "k", "1")
				if a.err != nil || a.replayed || a.resp.GetUsername() != "charge 2" {
					t.Fatalf("repeat: %+v, want a second execution (first: %v)", a, f.err)
				}
			})
		}
	}
}

// TestGRPCMetadataFromGoroutines: a handler that sets header and trailer metadata
// from goroutines it starts; every key its caller got comes back on a replay (and
// the capture is safe under -race).
func TestGRPCMetadataFromGoroutines(t *testing.T) {
	const parts = 16
	svc := &funcService{do: func(ctx context.Context, n int64) (*testgrpc.SimpleResponse, error) {
		var wg sync.WaitGroup
		for i := range parts {
			wg.Go(func() {
				_ = grpc.SetHeader(ctx, metadata.Pairs("x-h"+strconv.Itoa(i), strconv.Itoa(i)))
				_ = grpc.SetTrailer(ctx, metadata.Pairs("x-t"+strconv.Itoa(i), strconv.Itoa(i)))
			})
		}
		wg.Wait()
		return &testgrpc.SimpleResponse{Username: "charge " + strconv.FormatInt(n, 10)}, nil
	}}
	c := serveGRPC(t, svc, dedup.NewMemoryStore())
	for k := range 20 {
		key := "k" + strconv.Itoa(k)
		f := unary(context.Background(), c, key, "1")
		r := unary(context.Background(), c, key, "1")
		if f.err != nil || r.err != nil || !r.replayed {
			t.Fatalf("first %v, repeat %v (replayed %v)", f.err, r.err, r.replayed)
		}
		for i := range parts {
			h, tr := "x-h"+strconv.Itoa(i), "x-t"+strconv.Itoa(i)
			if len(f.header.Get(h)) != 1 || len(f.trailer.Get(tr)) != 1 {
				t.Fatalf("first: header %v trailer %v", f.header, f.trailer)
			}
			if len(r.header.Get(h)) != 1 || len(r.trailer.Get(tr)) != 1 {
				t.Fatalf("%s: replay lost %s or %s: header %v trailer %v", key, h, tr, r.header, r.trailer)
			}
		}
	}
	if svc.n.Load() != 20 {
		t.Fatalf("ran %d times, want 20", svc.n.Load())
	}
}

// TestGRPCRefusedHeaderNotReplayed: header metadata grpc-go refuses (SetHeader
// after SendHeader) never reached the first caller, so a replay does not carry it.
func TestGRPCRefusedHeaderNotReplayed(t *testing.T) {
	var refused atomic.Value
	svc := &funcService{do: func(ctx context.Context, n int64) (*testgrpc.SimpleResponse, error) {
		if err := grpc.SendHeader(ctx, metadata.Pairs("x-sent", "1")); err != nil {
			return nil, err
		}
		refused.Store(fmt.Sprint(grpc.SetHeader(ctx, metadata.Pairs("x-late", "1"))))
		if err := grpc.SendHeader(ctx, metadata.Pairs("x-again", "1")); err == nil {
			return nil, errors.New("a second SendHeader was accepted")
		}
		return &testgrpc.SimpleResponse{Username: "charge " + strconv.FormatInt(n, 10)}, nil
	}}
	c := serveGRPC(t, svc, dedup.NewMemoryStore())
	f := unary(context.Background(), c, "k", "1")
	r := unary(context.Background(), c, "k", "1")
	if f.err != nil || r.err != nil || !r.replayed || refused.Load() == "<nil>" {
		t.Fatalf("first %v, repeat %v (replayed %v), late SetHeader: %v", f.err, r.err, r.replayed, refused.Load())
	}
	if len(f.header.Get("x-late")) != 0 || len(f.header.Get("x-again")) != 0 || first(f.header.Get("x-sent")) != "1" {
		t.Fatalf("first's header: %v", f.header)
	}
	if len(r.header.Get("x-late")) != 0 || len(r.header.Get("x-again")) != 0 || first(r.header.Get("x-sent")) != "1" {
		t.Fatalf("replay's header %v, want the first's %v", r.header, f.header)
	}
}

// TestGRPCNotKeptCountsEverything: WithMaxResponseSize bounds all that is stored,
// not only the message: header and trailer metadata and an error's status with its
// details. A repeat of an answer not kept gets AlreadyExists, without the
// idempotent-replayed marker (it is not the stored answer), and the handler runs
// once.
func TestGRPCNotKeptCountsEverything(t *testing.T) {
	big := strings.Repeat("x", 300)
	cases := []struct {
		name string
		do   func(ctx context.Context) (*testgrpc.SimpleResponse, error)
		code codes.Code
	}{
		{"message", func(context.Context) (*testgrpc.SimpleResponse, error) {
			return &testgrpc.SimpleResponse{Username: big}, nil
		}, codes.OK},
		{"header", func(ctx context.Context) (*testgrpc.SimpleResponse, error) {
			_ = grpc.SetHeader(ctx, metadata.Pairs("x-big", big))
			return &testgrpc.SimpleResponse{Username: "ok"}, nil
		}, codes.OK},
		{"trailer", func(ctx context.Context) (*testgrpc.SimpleResponse, error) {
			_ = grpc.SetTrailer(ctx, metadata.Pairs("x-big", big))
			return &testgrpc.SimpleResponse{Username: "ok"}, nil
		}, codes.OK},
		{"status details", func(context.Context) (*testgrpc.SimpleResponse, error) {
			st, err := status.New(codes.FailedPrecondition, "declined").WithDetails(&errdetails.ErrorInfo{Reason: big})
			if err != nil {
				return nil, err
			}
			return nil, st.Err()
		}, codes.FailedPrecondition},
		{"status message", func(context.Context) (*testgrpc.SimpleResponse, error) {
			return nil, status.Error(codes.PermissionDenied, big)
		}, codes.PermissionDenied},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc := &funcService{do: func(ctx context.Context, _ int64) (*testgrpc.SimpleResponse, error) { return tc.do(ctx) }}
			c := serveGRPC(t, svc, dedup.NewMemoryStore(), dedup.WithMaxResponseSize(200))
			f := unary(context.Background(), c, "k", "1")
			if status.Code(f.err) != tc.code {
				t.Fatalf("first: %v, want %v", f.err, tc.code)
			}
			a := unary(context.Background(), c, "k", "1")
			msg := status.Convert(a.err).Message()
			if status.Code(a.err) != codes.AlreadyExists || a.replayed || !strings.Contains(msg, "not kept") || !strings.Contains(msg, tc.code.String()) {
				t.Fatalf("repeat: %v (replayed %v), want AlreadyExists naming %v, unmarked", a.err, a.replayed, tc.code)
			}
			if svc.n.Load() != 1 {
				t.Fatalf("ran %d times, want 1", svc.n.Load())
			}
		})
	}
	// Below the limit, all of it is kept.
	svc := &funcService{do: func(ctx context.Context, _ int64) (*testgrpc.SimpleResponse, error) {
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-small", "1"))
		st, _ := status.New(codes.FailedPrecondition, "declined").WithDetails(&errdetails.ErrorInfo{Reason: "funds"})
		return nil, st.Err()
	}}
	c := serveGRPC(t, svc, dedup.NewMemoryStore(), dedup.WithMaxResponseSize(200))
	f := unary(context.Background(), c, "k", "1")
	a := unary(context.Background(), c, "k", "1")
	if !a.replayed || !proto.Equal(status.Convert(a.err).Proto(), status.Convert(f.err).Proto()) || first(a.trailer.Get("x-small")) != "1" || svc.n.Load() != 1 {
		t.Fatalf("first %v, repeat %v (replayed %v, trailer %v), ran %d", f.err, a.err, a.replayed, a.trailer, svc.n.Load())
	}
}

// TestGRPCLateTrailerRefused: a trailer the handler's goroutine sets after the
// handler returned (while the layers outside dedup still run, before grpc-go sends
// the status) is refused, so that the first caller does not get a trailer that the
// stored answer lacks.
func TestGRPCLateTrailerRefused(t *testing.T) {
	returned := make(chan struct{})
	lateErr := make(chan error, 1)
	svc := &funcService{do: func(ctx context.Context, n int64) (*testgrpc.SimpleResponse, error) {
		if n == 1 {
			go func() {
				<-returned
				lateErr <- grpc.SetTrailer(ctx, metadata.Pairs("x-late", "1"))
			}()
		}
		return &testgrpc.SimpleResponse{Username: "charge " + strconv.FormatInt(n, 10)}, nil
	}}
	// outer runs outside dedup: once dedup has returned, it lets the handler's
	// goroutine set its trailer, and waits for it.
	outer := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		select {
		case <-returned:
		default:
			close(returned)
			<-lateErr
		}
		return resp, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(outer, dedup.UnaryServerInterceptor(dedup.NewMemoryStore())))
	testgrpc.RegisterTestServiceServer(srv, svc)
	go srv.Serve(l)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cc.Close(); srv.Stop() }()
	c := testgrpc.NewTestServiceClient(cc)
	f := unary(context.Background(), c, "k", "1")
	r := unary(context.Background(), c, "k", "1")
	if f.err != nil || r.err != nil || !r.replayed || svc.n.Load() != 1 {
		t.Fatalf("first %v, repeat %v (replayed %v), ran %d", f.err, r.err, r.replayed, svc.n.Load())
	}
	if len(f.trailer.Get("x-late")) != len(r.trailer.Get("x-late")) {
		t.Fatalf("first's trailer %v, replay's %v", f.trailer, r.trailer)
	}
}

// TestGRPCMetadataAfterCallerLeft: a handler that finishes its write after its caller
// left (its context ended) and then sets its header and trailer has its whole answer
// stored: grpc-go refuses the metadata of a stream that is done, but the refusal is the
// caller's absence, not the answer's, and the repeat that comes back gets the header
// and trailer the handler set, as a broken HTTP download's repeat gets the whole body.
func TestGRPCMetadataAfterCallerLeft(t *testing.T) {
	started := make(chan struct{})
	done := make(chan struct{})
	svc := &funcService{do: func(ctx context.Context, n int64) (*testgrpc.SimpleResponse, error) {
		if n == 1 {
			close(started)
			<-ctx.Done()
			defer close(done)
		}
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-charge", strconv.FormatInt(n, 10)))
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-ledger", "entry-"+strconv.FormatInt(n, 10)))
		return &testgrpc.SimpleResponse{Username: "charge " + strconv.FormatInt(n, 10)}, nil
	}}
	c := serveGRPC(t, svc, dedup.NewMemoryStore())
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	if f := unary(ctx, c, "k", "1"); status.Code(f.err) != codes.Canceled {
		t.Fatalf("first: %v", f.err)
	}
	<-done
	r := unary(context.Background(), c, "k", "1")
	if r.err != nil || !r.replayed || r.resp.GetUsername() != "charge 1" {
		t.Fatalf("repeat: %+v", r)
	}
	if first(r.header.Get("x-charge")) != "1" || first(r.trailer.Get("x-ledger")) != "entry-1" {
		t.Fatalf("repeat's header %v trailer %v, want the handler's", r.header, r.trailer)
	}
}
