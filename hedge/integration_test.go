package hedge_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/propagate"
)

// tailBackend decides the latency of a primary: every 100th is slow (until the
// client gives up), the others fast; hedges are always fast.
type tailBackend struct {
	primaries, hedges atomic.Int64
	slowCut           atomic.Int64 // slow handlers that saw their context end
	slowServed        atomic.Int64 // slow handlers that ran their 2 s: nobody hedged them
}

func (b *tailBackend) serve(ctx context.Context, previous string) {
	if previous != "" {
		b.hedges.Add(1)
		time.Sleep(time.Millisecond)
		return
	}
	if b.primaries.Add(1)%100 == 70 {
		select {
		case <-ctx.Done():
			b.slowCut.Add(1)
		case <-time.After(2 * time.Second):
			b.slowServed.Add(1)
		}
		return
	}
	time.Sleep(time.Millisecond)
}

// TestHTTPLoopback: a real server with a heavy tail, the hedging transport above
// propagate's. The slow primaries are rescued by hedges, which carry
// Grpc-Previous-Rpc-Attempts and a deadline of their own; the slow handlers see
// their request cancelled; the extra load stays small.
func TestHTTPLoopback(t *testing.T) {
	b := &tailBackend{}
	var withTimeout atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(propagate.HeaderGRPCTimeout) != "" {
			withTimeout.Add(1)
		}
		b.serve(r.Context(), r.Header.Get("Grpc-Previous-Rpc-Attempts"))
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	h := hedge.New(hedge.WithDelay(hedge.Delay{MinSamples: 50}))
	client := &http.Client{Transport: h.Transport(propagate.NewTransport(nil))}
	defer client.CloseIdleConnections()

	const calls = 400
	testkit.Parallel(4, calls, func(int) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	})
	st := h.Stats()
	t.Logf("stats %+v, delay %v", st, h.Delays())
	// A slow primary that ran its 2 s was nobody's loser: its call waited for it.
	if n := b.slowServed.Load(); n > 0 {
		t.Errorf("%d slow primaries answered after their 2 s: they were not hedged", n)
	}
	if st.Primaries != calls || st.Hedges > uint64(0.15*calls)+hedge.Burst || st.HedgeWins < 3 {
		t.Errorf("stats %+v", st)
	}
	if got := b.hedges.Load(); got > int64(st.Hedges) {
		t.Errorf("backend saw %d hedges, stats say %d", got, st.Hedges)
	}
	if withTimeout.Load() != b.primaries.Load()+b.hedges.Load() {
		t.Errorf("%d of %d requests carried grpc-timeout", withTimeout.Load(), b.primaries.Load()+b.hedges.Load())
	}
	waitFor(t, func() bool { return b.slowCut.Load() >= 3 }, "slow handlers to see their request cancelled")
}

// TestHTTPLosersClosed counts the server's open connections: losers' responses are
// drained and closed (their connections go back to the pool and are reused), and
// losers cut in flight leave no connection behind.
func TestHTTPLosersClosed(t *testing.T) {
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	var created atomic.Int64
	changed := make(chan struct{}, 1)
	hedgeArrived := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := strings.Repeat("x", 16<<10)
		switch {
		case r.Header.Get("Grpc-Previous-Rpc-Attempts") != "":
			if r.URL.Path == "/slow" {
				select {
				case hedgeArrived <- struct{}{}:
				default:
				}
			}
		case r.URL.Path == "/unavailable":
			// The primary answers 503 with a body: the hedge goes out at once
			// and the 503 must be drained and closed.
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			// The primary is slow and ignores cancellation: it is cut. It answers
			// only once its hedge has arrived, so that every call sends one however
			// late a loaded machine fires the hedge's timer.
			select {
			case <-hedgeArrived:
			case <-time.After(5 * time.Second):
			}
			time.Sleep(30 * time.Millisecond)
		}
		io.WriteString(w, body)
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch s {
		case http.StateNew:
			created.Add(1)
			open[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(open, c)
		}
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	srv.Start()
	defer srv.Close()
	openConns := func() int { mu.Lock(); defer mu.Unlock(); return len(open) }

	// Every call hedged: an extra load of 1 lets each primary pay for its hedge.
	h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: 5 * time.Millisecond}), hedge.WithMaxExtraLoad(1))
	client := &http.Client{Transport: h.Transport(nil)}
	for _, path := range []string{"/unavailable", "/slow"} {
		for range 20 {
			resp, err := client.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || len(b) != 16<<10 {
				t.Fatalf("%s: got %d with %d bytes; %+v", path, resp.StatusCode, len(b), h.Stats())
			}
		}
		if path == "/unavailable" {
			// Each 503 was drained: connections are reused, not one per loser.
			if n := created.Load(); n > 10 {
				t.Errorf("%d connections for 20 calls with a drained loser each, want reuse", n)
			}
		}
	}
	// Every call sent its hedge. The 20 hedges after a 503 always win; a hedge
	// racing a 30 ms primary usually does, but on a loaded machine it may lose, which
	// is fine here: what is counted is the connections.
	st := h.Stats()
	if st.Hedges != 40 || st.HedgeWins < 20 {
		t.Errorf("stats %+v, want 40 hedges, at least the 20 after a 503 winning", st)
	}
	client.CloseIdleConnections()
	deadline := time.After(5 * time.Second)
	for openConns() > 0 {
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%d connections still open after CloseIdleConnections (%d created): a loser's body was not closed", openConns(), created.Load())
		case <-time.After(50 * time.Millisecond):
			client.CloseIdleConnections() // a loser may have gone idle since
		}
	}
	t.Logf("%d connections created for 40 calls and 40 hedges", created.Load())
}

// storeServer is the gRPC backend: UnaryCall has a heavy tail; EmptyCall is slow and
// is not idempotent.
type storeServer struct {
	testgrpc.UnimplementedTestServiceServer
	tail  tailBackend
	empty atomic.Int64
}

func previous(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, "grpc-previous-rpc-attempts"); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (s *storeServer) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	p := previous(ctx)
	s.tail.serve(ctx, p)
	return &testgrpc.SimpleResponse{Username: "attempt:" + p}, nil
}

func (s *storeServer) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	s.empty.Add(1)
	time.Sleep(20 * time.Millisecond)
	return &testgrpc.Empty{}, nil
}

// TestGRPCLoopback: hedging over a real gRPC connection, with propagate's interceptor
// after hedge's: the idempotent method's slow primaries are rescued; the method not
// declared idempotent reaches the server exactly once per call, even though every
// call outlasts the delay.
func TestGRPCLoopback(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &storeServer{}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(propagate.UnaryServerInterceptor()))
	testgrpc.RegisterTestServiceServer(gs, s)
	go gs.Serve(lis)
	defer gs.Stop()

	const unary = "/grpc.testing.TestService/UnaryCall"
	h := hedge.New(hedge.WithDelay(hedge.Delay{MinSamples: 50, Initial: 5 * time.Millisecond}), hedge.WithIdempotentMethods(unary))
	cc, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(h.UnaryClientInterceptor(), propagate.UnaryClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := testgrpc.NewTestServiceClient(cc)

	var hedgeAnswers atomic.Int64
	testkit.Parallel(4, 400, func(int) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		if err != nil {
			t.Error(err)
			return
		}
		if resp.Username == "attempt:1" {
			hedgeAnswers.Add(1)
		}
	})
	st := h.Stats()
	t.Logf("stats %+v, delays %v", st, h.Delays())
	if n := s.tail.slowServed.Load(); n > 0 {
		t.Errorf("%d slow primaries answered after their 2 s: they were not hedged", n)
	}
	if st.Primaries != 400 || st.Hedges > uint64(0.15*400)+hedge.Burst || st.HedgeWins < 3 || hedgeAnswers.Load() != int64(st.HedgeWins) {
		t.Errorf("stats %+v, %d answers from hedges", st, hedgeAnswers.Load())
	}

	for range 20 {
		if _, err := client.EmptyCall(context.Background(), &testgrpc.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.empty.Load(); got != 20 {
		t.Errorf("EmptyCall reached the server %d times for 20 calls", got)
	}
	if st := h.Stats(); st.NotIdempotent != 20 {
		t.Errorf("NotIdempotent = %d, want 20", st.NotIdempotent)
	}
	waitFor(t, func() bool { return s.tail.slowCut.Load() >= 3 }, "slow handlers to see their call cancelled")
}

// waitFor polls cond (a real server's state) for up to 5 s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
