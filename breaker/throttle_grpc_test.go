package breaker_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
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

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/retry"
)

// grpcRefuser refuses four calls in five for load: RESOURCE_EXHAUSTED with
// RetryInfo, as an overloaded toolkit server answers.
type grpcRefuser struct {
	testgrpc.UnimplementedTestServiceServer
	hits      atomic.Int64
	accepting atomic.Bool  // accept every call, counted in seen only
	seen      atomic.Int64 // every call
}

func (s *grpcRefuser) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.seen.Add(1)
	if s.accepting.Load() {
		return &testgrpc.SimpleResponse{}, nil
	}
	if s.hits.Add(1)%5 != 0 {
		st, _ := status.New(codes.ResourceExhausted, "overloaded").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Millisecond)})
		return nil, st.Err()
	}
	return &testgrpc.SimpleResponse{}, nil
}

func listenRefuser(t *testing.T, s *grpcRefuser) string { return listenGRPC(t, s) }

func TestThrottleGRPC(t *testing.T) {
	s := &grpcRefuser{}
	b := breaker.New(countOnly)
	client := dialGRPC(t, listenRefuser(t, s), b)
	ctx := criticality.With(context.Background(), criticality.Sheddable)
	const calls = 400
	var throttled int
	var last error
	for range calls {
		var tr metadata.MD
		_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Trailer(&tr))
		if errors.Is(err, breaker.ErrThrottled) {
			throttled++
			last = err
			if status.Code(err) != codes.ResourceExhausted || len(tr.Get(pushback.Key)) != 1 || tr.Get(pushback.Key)[0] != pushback.DoNotRetry {
				t.Fatalf("refusal %v, trailer %v: want RESOURCE_EXHAUSTED and 'do not retry'", err, tr)
			}
		} else if err != nil && status.Code(err) != codes.ResourceExhausted {
			t.Fatal(err)
		}
	}
	t.Logf("sent %d of %d", s.hits.Load(), calls)
	// The first MinRequests calls are sent, and each accept lets about K more
	// through: about an eighth of the calls (at most a quarter in 30 000 runs of a
	// model of it).
	if s.hits.Load()+int64(throttled) != calls || s.hits.Load()*3 > calls {
		t.Fatalf("sent %d, throttled %d, of %d: want at most a third sent", s.hits.Load(), throttled, calls)
	}
	if v, ok := pushback.Of(last); !ok || v != pushback.DoNotRetry {
		t.Fatalf("the refusal carries pushback %q %v", v, ok)
	}

	// Relayed by a server, it answers as an overload refusal does: come back.
	st := status.Convert(deadlinekit.GRPCError(context.Background(), last))
	if d, found, err := pushback.RetryInfoDelay(st); st.Code() != codes.ResourceExhausted || !found || err != nil || d <= 0 {
		t.Fatalf("relayed over gRPC: %v, RetryInfo %v %v %v", st, d, found, err)
	}
	rec := httptest.NewRecorder()
	deadlinekit.WriteHTTPError(rec, last)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get(pushback.RetryAfterKey) == "" || rec.Header().Get(pushback.RelayedKey) != pushback.Yes {
		t.Fatalf("relayed over HTTP: %d %v", rec.Code, rec.Header())
	}
}

func TestThrottledCallsAreNotRetried(t *testing.T) {
	s := &grpcRefuser{}
	var mu sync.Mutex
	var throttledEvents, retried int
	obs := retry.WithObserver(func(_ context.Context, e retry.Event) {
		if errors.Is(e.Err, breaker.ErrThrottled) {
			mu.Lock()
			throttledEvents++
			if e.Action == retry.Retry {
				retried++
			}
			mu.Unlock()
		}
	})
	opts := append(deadlinekit.DialOptions(deadlinekit.WithBreaker(countOnly), deadlinekit.WithRetry(obs), deadlinekit.Without(deadlinekit.Hedge)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	cc, err := grpc.NewClient(listenRefuser(t, s), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := testgrpc.NewTestServiceClient(cc)
	ctx := criticality.With(context.Background(), criticality.Sheddable)
	const calls = 200
	for range calls {
		if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil && status.Code(err) != codes.ResourceExhausted {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d calls: %d sent, %d attempts throttled", calls, s.hits.Load(), throttledEvents)
	if throttledEvents == 0 || retried != 0 {
		t.Fatalf("%d throttled attempts, %d of them retried: want some, none retried", throttledEvents, retried)
	}
}

func TestThrottlePerEndpoint(t *testing.T) {
	one, two := &grpcRefuser{}, &grpcRefuser{}
	b := breaker.New(countOnly)
	client, target := dialEndpoints(t, b, listenRefuser(t, one), listenRefuser(t, two))
	// Until both endpoints are ready (round_robin picks only those), every call is
	// accepted, at critical-plus: an accept counts for the levels above its own.
	one.accepting.Store(true)
	two.accepting.Store(true)
	warm := criticality.With(context.Background(), criticality.CriticalPlus)
	for start := time.Now(); one.seen.Load() == 0 || two.seen.Load() == 0; {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("30 s of calls went to one backend (%d, %d)", one.seen.Load(), two.seen.Load())
		}
		time.Sleep(time.Millisecond)
		if _, err := client.UnaryCall(warm, &testgrpc.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	one.accepting.Store(false)
	two.accepting.Store(false)
	ctx := criticality.With(context.Background(), criticality.Sheddable)
	const calls = 400
	for range calls {
		if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil && status.Code(err) != codes.ResourceExhausted {
			t.Fatal(err)
		}
	}
	sent := one.hits.Load() + two.hits.Load()
	t.Logf("sent %d of %d (%d, %d)", sent, calls, one.hits.Load(), two.hits.Load())
	// Each endpoint's first MinRequests calls are sent, each accept lets about K
	// more through, and a call one endpoint throttles may go to the other: about a
	// fifth of the calls (at most 166 of 400 in 50 000 runs of a model of it).
	if sent*5 > calls*2 {
		t.Fatalf("sent %d of %d: want at most two fifths", sent, calls)
	}
	// The endpoints' circuits judged the calls: the target's throttle, which did
	// not decide, has counted nothing but the first calls, before the policy had
	// both endpoints.
	var endpoints int
	for _, c := range b.Circuits() {
		if c.Target == target {
			if tl := throttleLevel(t, b, target, criticality.Sheddable); tl.Probability > 0.5 {
				t.Fatalf("target circuit's throttle %+v", tl)
			}
			continue
		}
		endpoints++
		if tl := throttleLevel(t, b, c.Target, criticality.Sheddable); tl.Requests == 0 {
			t.Fatalf("endpoint %s counted nothing", c.Target)
		}
	}
	if endpoints != 2 {
		t.Fatalf("%d endpoint circuits", endpoints)
	}
}

// streamRefuser refuses every stream for load.
type streamRefuser struct {
	testgrpc.UnimplementedTestServiceServer
	hits atomic.Int64
}

func (s *streamRefuser) StreamingOutputCall(*testgrpc.StreamingOutputCallRequest, testgrpc.TestService_StreamingOutputCallServer) error {
	s.hits.Add(1)
	return status.Error(codes.ResourceExhausted, "overloaded")
}

func TestThrottleStreams(t *testing.T) {
	s := &streamRefuser{}
	b := breaker.New(countOnly)
	client := dialGRPC(t, listenGRPC(t, s), b)
	ctx := criticality.With(context.Background(), criticality.Sheddable)
	const calls = 100
	throttled := 0
	for range calls {
		st, err := client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
		if err == nil {
			_, err = st.Recv()
		}
		switch {
		case errors.Is(err, breaker.ErrThrottled):
			throttled++
		case status.Code(err) != codes.ResourceExhausted:
			t.Fatal(err)
		}
	}
	t.Logf("opened %d of %d streams", s.hits.Load(), calls)
	if s.hits.Load()+int64(throttled) != calls || s.hits.Load()*4 > calls {
		t.Fatalf("opened %d, throttled %d, of %d", s.hits.Load(), throttled, calls)
	}
}

// With one of two endpoints unreachable, round_robin picks the other for every
// try of a pick: its throttle draws once per call, and counts one request.
func TestThrottleDrawsOncePerEndpoint(t *testing.T) {
	s := &grpcRefuser{}
	b := breaker.New(countOnly)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	live := listenRefuser(t, s)
	client, target := dialEndpoints(t, b, live, dead)
	ctx := criticality.With(context.Background(), criticality.Sheddable)
	const calls = 200
	for range calls {
		if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil && status.Code(err) != codes.ResourceExhausted {
			t.Fatal(err)
		}
	}
	tl := throttleLevel(t, b, target+"@"+live, criticality.Sheddable)
	t.Logf("sent %d of %d; the endpoint's throttle: %+v", s.hits.Load(), calls, tl)
	// The first MinRequests calls are sent, and each accept lets about K more
	// through: about a sixth (at most 70 of 200 in 50 000 runs of a model of it).
	if tl.Requests != calls || s.hits.Load()*5 > calls*2 {
		t.Fatalf("the live endpoint's throttle counted %d requests for %d calls (%d sent)", tl.Requests, calls, s.hits.Load())
	}
}
