package breaker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/breaker"
)

// watchBackend's StreamingOutputCall is a watch: it fails with UNAVAILABLE while
// down is set; else it sends one message unless idle is set, then holds the stream
// open until its context ends (the caller's cancellation, or the deadline the
// caller sent).
type watchBackend struct {
	testgrpc.UnimplementedTestServiceServer
	down, idle atomic.Bool
	watches    atomic.Int32
}

func (s *watchBackend) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if s.down.Load() {
		return nil, status.Error(codes.Unavailable, "down")
	}
	return &testgrpc.SimpleResponse{}, nil
}

func (s *watchBackend) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, st testgrpc.TestService_StreamingOutputCallServer) error {
	s.watches.Add(1)
	if s.down.Load() {
		return status.Error(codes.Unavailable, "down")
	}
	if !s.idle.Load() {
		if err := st.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	<-st.Context().Done()
	return status.FromContextError(st.Context().Err()).Err()
}

// serveWatch starts a loopback gRPC server of s, and returns a client through b's
// interceptors, then through more.
func serveWatch(t *testing.T, s *watchBackend, b *breaker.Breaker, more ...grpc.StreamClientInterceptor) testgrpc.TestServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(listenGRPC(t, s), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(b.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(append([]grpc.StreamClientInterceptor{b.StreamClientInterceptor()}, more...)...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

// A stream whose context ends as it is opened (here: an interceptor beneath the
// breaker cancels it once the stream exists) is counted once, race-free: the
// breaker's context.AfterFunc may run at once.
func TestGRPCStreamUnderEndedContext(t *testing.T) {
	s := &watchBackend{}
	s.idle.Store(true)
	var cancel atomic.Pointer[context.CancelFunc]
	cancelling := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		(*cancel.Load())()
		return cs, err
	}
	b := breaker.New()
	client := serveWatch(t, s, b, cancelling)
	counted := func() uint64 { st := b.Stats(); return st.Neutral + st.Successes + st.Failures }
	for i := range 20 {
		ctx, c := context.WithCancel(context.Background())
		cancel.Store(&c)
		st, err := client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
		if err == nil {
			// The outcome is counted on AfterFunc's goroutine, before the caller
			// reads the stream's end.
			for counted() != uint64(i+1) {
				time.Sleep(time.Millisecond)
			}
			_, err = st.Recv()
		}
		if status.Code(err) != codes.Canceled {
			t.Fatalf("err = %v; want CANCELED", err)
		}
	}
	if st := b.Stats(); st.Neutral != 20 {
		t.Errorf("stats %+v; want 20 neutral outcomes, one per cancelled stream", st)
	}
}

// halfOpenGRPC opens b's circuit with a failing unary call (b trips on one
// failure) and waits until it lets probes through.
func halfOpenGRPC(t *testing.T, s *watchBackend, b *breaker.Breaker, client testgrpc.TestServiceClient) {
	t.Helper()
	s.down.Store(true)
	defer s.down.Store(false)
	if _, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v; want UNAVAILABLE", err)
	}
	for {
		cs := b.Circuits()
		if len(cs) == 1 && cs[0].State == breaker.HalfOpen {
			return
		}
		time.Sleep(time.Millisecond) // the sleep is a lower bound: no upper one is assumed
	}
}

// A healthy long-lived watch taken as the half-open probe closes the circuit at its
// first message, not when it ends: the target's unary calls flow at once, and the
// watch's end is not counted again.
func TestGRPCProbeWatchClosesAtFirstMessage(t *testing.T) {
	for _, first := range []string{"message", "header"} {
		t.Run(first, func(t *testing.T) {
			s := &watchBackend{}
			// The sleep is long beside the test's steps: the probe's slot would be
			// given up on only after it.
			b := breaker.New(breaker.WithConsecutiveFailures(1), breaker.WithOpenFor(300*time.Millisecond), breaker.WithProbes(1))
			client := serveWatch(t, s, b)
			halfOpenGRPC(t, s, b, client)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st, err := client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if first == "message" {
				_, err = st.Recv()
			} else {
				_, err = st.Header()
			}
			if err != nil {
				t.Fatal(err)
			}
			if c := b.Circuits()[0]; c.State != breaker.Closed {
				t.Errorf("circuit %v once the probe watch answered (%s); want closed", c.State, first)
			}
			if _, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}); err != nil {
				t.Errorf("a unary call while the probe watch runs: %v; want it sent", err)
			}
			before := b.Stats()
			cancel()
			for {
				if _, err := st.Recv(); err != nil {
					break
				}
			}
			after := b.Stats()
			if after.Successes+after.Failures+after.Neutral != before.Successes+before.Failures+before.Neutral {
				t.Errorf("the probe watch's end was counted again: %+v, then %+v", before, after)
			}
		})
	}
}

// A watch that receives nothing before its caller's deadline says nothing of the
// target: the deadline a caller sets on a stream is the caller's choice of how long
// to listen. Idle watches do not open the circuit.
func TestGRPCIdleWatchDeadlineIsNeutral(t *testing.T) {
	s := &watchBackend{}
	s.idle.Store(true)
	b := breaker.New(breaker.WithConsecutiveFailures(1))
	client := serveWatch(t, s, b)
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		st, err := client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
		if err == nil {
			_, err = st.Recv()
		}
		cancel()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("err = %v; want DEADLINE_EXCEEDED", err)
		}
	}
	for st := b.Stats(); st.Neutral+st.Successes+st.Failures != 3; st = b.Stats() {
		time.Sleep(time.Millisecond)
	}
	if st := b.Stats(); st.Failures != 0 || st.Opens != 0 {
		t.Errorf("stats %+v after 3 idle watches ended by their deadline; want no failure, no open", st)
	}
	if _, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}); err != nil {
		t.Errorf("a unary call after the idle watches: %v", err)
	}
}
