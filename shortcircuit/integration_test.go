package shortcircuit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	//lint:ignore ST1019 grpc-go's convention: testgrpc for the service, testpb for its messages (one package)
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// Integration tests on real loopback servers. Budgets are chosen far from the floor
// (a "below" request has 300ms left for a 1s floor, an "above" one 10s), so a slow
// machine cannot turn one into the other.
const (
	burst       = 20
	floor       = time.Second
	belowBudget = 300 * time.Millisecond
	aboveBudget = 10 * time.Second
)

// budgetHeader stands in for package propagate in these tests: it puts the budget
// named by the X-Test-Budget-Ms header on the request's context.
func budgetHeader(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.Header.Get("X-Test-Budget-Ms"))
		if err != nil {
			next.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), time.Duration(n)*time.Millisecond)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func TestHTTPBurstLoopback(t *testing.T) {
	var c shortcircuit.Counter
	var ran sync.Map // budget header → handler ran
	var runs atomic.Int32
	h := budgetHeader(shortcircuit.NewMiddleware(shortcircuit.WithFloor(floor), shortcircuit.WithObserver(c.Observe))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			ran.Store(r.Header.Get("X-Test-ID"), true)
			io.WriteString(w, "done")
		})))
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := srv.Client()

	type result struct {
		below bool
		code  int
		body  string
		err   error
	}
	results := make([]result, burst)
	var wg sync.WaitGroup
	for i := range burst {
		wg.Go(func() {
			below := i%2 == 0
			budget := aboveBudget
			if below {
				budget = belowBudget
			}
			req, _ := http.NewRequest("GET", srv.URL+"/work", nil)
			req.Header.Set("X-Test-Budget-Ms", strconv.Itoa(int(budget/time.Millisecond)))
			req.Header.Set("X-Test-ID", strconv.Itoa(i))
			resp, err := client.Do(req)
			if err != nil {
				results[i] = result{below: below, err: err}
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			results[i] = result{below, resp.StatusCode, string(body), nil}
		})
	}
	wg.Wait()

	for i, r := range results {
		_, handlerRan := ran.Load(strconv.Itoa(i))
		switch {
		case r.err != nil:
			t.Errorf("request %d: %v", i, r.err)
		case r.below && (r.code != http.StatusGatewayTimeout || handlerRan ||
			!strings.HasPrefix(r.body, "shortcircuit: ") || !strings.HasSuffix(r.body, " left, floor 1s: request refused before the handler ran\n")):
			t.Errorf("request %d (300ms left): %d %q, handler ran %v; want 504 with the message, no handler", i, r.code, r.body, handlerRan)
		case !r.below && (r.code != http.StatusOK || r.body != "done" || !handlerRan):
			t.Errorf("request %d (10s left): %d %q, handler ran %v; want 200 from the handler", i, r.code, r.body, handlerRan)
		}
	}
	if n := runs.Load(); n != burst/2 {
		t.Errorf("handler ran %d times; want %d", n, burst/2)
	}
	if s := c.Stats(); s.Admitted != burst/2 || s.BelowFloor != burst/2 || s.Expired != 0 {
		t.Errorf("stats %+v; want %d admitted, %d below the floor", s, burst/2, burst/2)
	}
}

// testService is grpc-go's interop TestService with the two methods the tests use.
type testService struct {
	testgrpc.UnimplementedTestServiceServer
	unaryRuns atomic.Int32
	ran       sync.Map // payload body → handler ran
	// unaryWork, when set, is UnaryCall's work.
	unaryWork func(context.Context, chan struct{}) error
	slots     chan struct{}

	// streamEnded receives StreamingOutputCall's context once it has ended; the
	// handler then keeps working until streamRelease is closed.
	streamEnded   chan context.Context
	streamRelease chan struct{}
}

func (s *testService) UnaryCall(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.unaryRuns.Add(1)
	s.ran.Store(string(in.GetPayload().GetBody()), true)
	if s.unaryWork != nil {
		if err := s.unaryWork(ctx, s.slots); err != nil {
			return nil, status.FromContextError(err).Err()
		}
	}
	return &testpb.SimpleResponse{Payload: in.GetPayload()}, nil
}

// StreamingOutputCall sends a message every 10ms until its context ends, then keeps
// working until the test releases it (cleanup that ignores the deadline), the
// overrun the guard must report.
func (s *testService) StreamingOutputCall(in *testpb.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	ctx := stream.Context()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var err error
	for err == nil {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-tick.C:
			// Fails once the stream is cancelled, maybe before Done is seen.
			err = stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte("tick")}})
		}
	}
	s.streamEnded <- ctx
	<-s.streamRelease
	return err
}

func startGRPC(t *testing.T, svc *testService, opts ...shortcircuit.Option) testgrpc.TestServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(shortcircuit.UnaryServerInterceptor(opts...)),
		grpc.StreamInterceptor(shortcircuit.StreamServerInterceptor(opts...)),
	)
	testgrpc.RegisterTestServiceServer(srv, svc)
	go srv.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	return testgrpc.NewTestServiceClient(conn)
}

func TestGRPCBurstLoopback(t *testing.T) {
	var c shortcircuit.Counter
	svc := &testService{}
	client := startGRPC(t, svc, shortcircuit.WithFloor(floor), shortcircuit.WithObserver(c.Observe))

	errs := make([]error, burst)
	var wg sync.WaitGroup
	for i := range burst {
		wg.Go(func() {
			budget := aboveBudget
			if i%2 == 0 {
				budget = belowBudget
			}
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			_, errs[i] = client.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(strconv.Itoa(i))}})
		})
	}
	wg.Wait()

	for i, err := range errs {
		_, handlerRan := svc.ran.Load(strconv.Itoa(i))
		if i%2 == 1 {
			if err != nil || !handlerRan {
				t.Errorf("call %d (10s left): err %v, handler ran %v; want success", i, err, handlerRan)
			}
			continue
		}
		msg := status.Convert(err).Message()
		if status.Code(err) != codes.DeadlineExceeded || handlerRan ||
			!strings.HasPrefix(msg, "shortcircuit: ") || !strings.HasSuffix(msg, " left, floor 1s: request refused before the handler ran") {
			t.Errorf("call %d (300ms left): %v, handler ran %v; want DeadlineExceeded with the message, no handler", i, err, handlerRan)
		}
	}
	if n := svc.unaryRuns.Load(); n != burst/2 {
		t.Errorf("handler ran %d times; want %d", n, burst/2)
	}
	if s := c.Stats(); s.Admitted != burst/2 || s.BelowFloor != burst/2 {
		t.Errorf("stats %+v", s)
	}
}

// TestGRPCStreamBudgetRunsOut: a server stream admitted with 300ms left outlives its
// budget. The handler's context is cancelled at the deadline (by the client's
// RST_STREAM or the server's own timer, whichever comes first), the client gets
// DeadlineExceeded, and the guard reports the time the handler kept working.
func TestGRPCStreamBudgetRunsOut(t *testing.T) {
	events := make(chan shortcircuit.Event, 1)
	svc := &testService{streamEnded: make(chan context.Context, 1), streamRelease: make(chan struct{})}
	client := startGRPC(t, svc, shortcircuit.WithFloor(50*time.Millisecond),
		shortcircuit.WithObserver(func(_ context.Context, e shortcircuit.Event) { events <- e }))
	release := sync.OnceFunc(func() { close(svc.streamRelease) })
	t.Cleanup(release) // before the server stops, if the test ends early

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	stream, err := client.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	received := 0
	for {
		_, err = stream.Recv()
		if err != nil {
			break
		}
		received++
	}
	if status.Code(err) != codes.DeadlineExceeded || received == 0 {
		t.Fatalf("client: %d messages then %v; want some, then DeadlineExceeded", received, err)
	}

	timeout := time.After(10 * time.Second) // a bound for a hung server, not a measurement
	select {
	case hctx := <-svc.streamEnded:
		if herr := hctx.Err(); !errors.Is(herr, context.DeadlineExceeded) && !errors.Is(herr, context.Canceled) {
			t.Fatalf("handler's context ended with %v; want it cancelled", herr)
		}
		// The handler keeps working until 100ms past its deadline: a lower bound
		// of its overrun that a slow machine can only lengthen.
		d, _ := hctx.Deadline()
		<-time.After(time.Until(d.Add(100 * time.Millisecond)))
		release()
	case <-timeout:
		t.Fatal("handler still running")
	}
	select {
	case e := <-events:
		if e.Admission != shortcircuit.Admitted || e.Route != testgrpc.TestService_StreamingOutputCall_FullMethodName || e.Success {
			t.Errorf("event %+v", e)
		}
		// The handler ends no sooner than 100ms past its context's deadline (the
		// server's: arrival + grpc-timeout), whichever cancelled it first: the
		// overrun is at least that, less any reserve between the guard's deadline
		// and the handler's.
		if e.Overrun < 50*time.Millisecond || e.Overrun > e.Duration {
			t.Errorf("overrun %v (duration %v); want ≥ 50ms", e.Overrun, e.Duration)
		}
		t.Logf("stream: %d messages, ran %v, overrun %v", received, e.Duration, e.Overrun)
	case <-timeout:
		t.Fatal("no event for the stream")
	}
}
