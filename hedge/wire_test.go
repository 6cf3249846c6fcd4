package hedge_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// The budgets of TestRefusedHedgeLeavesCallToPrimary: the shape of issue 13's bug 1
// (server floor 20 ms, client reserve 5 ms and floor 10 ms, hedge floor 20 ms, a
// hedge fired with 22 ms left), with gaps wide enough that no scheduling delay on a
// loaded machine moves a copy to the other side of a floor. The call has 1 s; its
// hedge goes out at 500 ms with about 500 ms left, 495 ms once the reserve is kept:
// below a 700 ms floor, while the primary, sent with 995 ms, is above it.
const (
	wireBudget  = time.Second
	wireDelay   = 500 * time.Millisecond
	wireReserve = 5 * time.Millisecond
	wideFloor   = 700 * time.Millisecond
	smallFloor  = 10 * time.Millisecond
)

// hedgeEnded returns a traced context whose hedge attempt span, when it ends, closes
// the returned channel. The hedging layer ends an attempt's span when it takes that
// attempt's result, in the same step as it decides what the result does to the call:
// once the channel is closed, a primary answering now answers a call whose fate the
// hedge's refusal has already settled.
func hedgeEnded(ctx context.Context) (context.Context, <-chan struct{}) {
	ctx, tp := traced(ctx)
	ch := make(chan struct{})
	var once sync.Once
	tp.onEnd = func(s *fakeSpan) {
		if s.name == "attempt hedge" {
			once.Do(func() { close(ch) })
		}
	}
	return ctx, ch
}

// TestRefusedHedgeLeavesCallToPrimary (issue 13, bug 1): the real layers stacked as a
// user stacks them, hedge above propagate on the client, propagate above
// shortcircuit on the server. The hedge is refused, by the server's floor
// ("downstream") or by propagate's own floor before it is sent ("local"); the
// primary, healthy, answers once the layer has taken the refusal. The call is the
// primary's answer: the refusal neither ends it nor cancels the primary.
func TestRefusedHedgeLeavesCallToPrimary(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		serverFloor, localFloor time.Duration
		wantRequests, want504   int64 // reaching the server; refused by it
	}{
		{"downstream", wideFloor, smallFloor, 2, 1},
		{"local", 2 * smallFloor, wideFloor, 1, 0},
	} {
		t.Run("http/"+tc.name, func(t *testing.T) {
			ctx, ended := hedgeEnded(context.Background())
			ctx, cancel := context.WithTimeout(ctx, wireBudget)
			defer cancel()
			var requests, refused atomic.Int64
			app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Grpc-Previous-Rpc-Attempts") != "" {
					io.WriteString(w, "hedge")
					return
				}
				select {
				case <-ended:
					io.WriteString(w, "primary")
				case <-r.Context().Done():
					http.Error(w, "cancelled", http.StatusGatewayTimeout)
				}
			})
			guarded := propagate.NewMiddleware()(shortcircuit.NewMiddleware(shortcircuit.WithFloor(tc.serverFloor))(app))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				sw := &statusRecorder{ResponseWriter: w}
				guarded.ServeHTTP(sw, r)
				if sw.code == http.StatusGatewayTimeout && r.Header.Get("Grpc-Previous-Rpc-Attempts") != "" {
					refused.Add(1)
				}
			}))
			defer srv.Close()
			base := &http.Transport{}
			defer base.CloseIdleConnections()
			h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: wireDelay}), hedge.WithFloor(20*time.Millisecond))
			client := &http.Client{Transport: h.Transport(propagate.NewTransport(base,
				propagate.WithReserve(wireReserve), propagate.WithFloor(tc.localFloor)))}

			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("call failed: %v (stats %+v)", err, h.Stats())
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "primary" {
				t.Errorf("got %d %q; want the primary's 200", resp.StatusCode, body)
			}
			if st := h.Stats(); st.Hedges != 1 || st.HedgeWins != 0 {
				t.Errorf("stats %+v; want 1 hedge, no win", st)
			}
			if requests.Load() != tc.wantRequests || refused.Load() != tc.want504 {
				t.Errorf("server saw %d requests, refused %d hedges; want %d and %d", requests.Load(), refused.Load(), tc.wantRequests, tc.want504)
			}
		})
		t.Run("grpc/"+tc.name, func(t *testing.T) {
			ctx, ended := hedgeEnded(context.Background())
			ctx, cancel := context.WithTimeout(ctx, wireBudget)
			defer cancel()
			var requests, refused atomic.Int64
			count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
				requests.Add(1)
				resp, err := handler(ctx, req)
				if status.Code(err) == codes.DeadlineExceeded && len(metadata.ValueFromIncomingContext(ctx, "grpc-previous-rpc-attempts")) > 0 {
					refused.Add(1)
				}
				return resp, err
			}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			gs := grpc.NewServer(grpc.ChainUnaryInterceptor(count, propagate.UnaryServerInterceptor(),
				shortcircuit.UnaryServerInterceptor(shortcircuit.WithFloor(tc.serverFloor))))
			testgrpc.RegisterTestServiceServer(gs, &primaryServer{ended: ended})
			go gs.Serve(lis)
			defer gs.Stop()
			const unary = "/grpc.testing.TestService/UnaryCall"
			h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: wireDelay}), hedge.WithFloor(20*time.Millisecond), hedge.WithIdempotentMethods(unary))
			cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithChainUnaryInterceptor(h.UnaryClientInterceptor(),
					propagate.UnaryClientInterceptor(propagate.WithReserve(wireReserve), propagate.WithFloor(tc.localFloor))))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()

			resp, err := testgrpc.NewTestServiceClient(cc).UnaryCall(ctx, &testgrpc.SimpleRequest{})
			if err != nil {
				t.Fatalf("call failed: %v (stats %+v)", err, h.Stats())
			}
			if resp.Username != "primary" {
				t.Errorf("answer %q; want the primary's", resp.Username)
			}
			if st := h.Stats(); st.Hedges != 1 || st.HedgeWins != 0 {
				t.Errorf("stats %+v; want 1 hedge, no win", st)
			}
			if requests.Load() != tc.wantRequests || refused.Load() != tc.want504 {
				t.Errorf("server saw %d calls, refused %d hedges; want %d and %d", requests.Load(), refused.Load(), tc.wantRequests, tc.want504)
			}
		})
	}
}

// statusRecorder notes the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// primaryServer answers a hedge at once and a primary once ended is closed (or its
// call is cancelled).
type primaryServer struct {
	testgrpc.UnimplementedTestServiceServer
	ended <-chan struct{}
}

func (s *primaryServer) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if len(metadata.ValueFromIncomingContext(ctx, "grpc-previous-rpc-attempts")) > 0 {
		return &testgrpc.SimpleResponse{Username: "hedge"}, nil
	}
	select {
	case <-s.ended:
		return &testgrpc.SimpleResponse{Username: "primary"}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// finishServer: a primary waits for its call to be cancelled; a hedge answers at
// once. A request with ResponseSize 1 fails with INTERNAL, one with ResponseSize 2
// answers at once whatever its kind.
type finishServer struct {
	testgrpc.UnimplementedTestServiceServer
}

func (finishServer) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	switch req.ResponseSize {
	case 1:
		return nil, status.Error(codes.Internal, "broken")
	case 2:
		return &testgrpc.SimpleResponse{}, nil
	}
	if len(metadata.ValueFromIncomingContext(ctx, "grpc-previous-rpc-attempts")) > 0 {
		return &testgrpc.SimpleResponse{Username: "hedge"}, nil
	}
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// TestOnFinishOnce (issue 13, bug 13): a caller's grpc.OnFinish callback runs once
// per call, with the call's own result, however many copies the call sent: not once
// per copy, and never with the Canceled of a cancelled loser.
func TestOnFinishOnce(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(gs, finishServer{})
	go gs.Serve(lis)
	defer gs.Stop()
	const unary = "/grpc.testing.TestService/UnaryCall"
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(hedge.New(hedge.WithDelay(hedge.Delay{Initial: 20 * time.Millisecond}), hedge.WithIdempotentMethods(unary)).UnaryClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := testgrpc.NewTestServiceClient(cc)

	for _, tc := range []struct {
		name string
		size int32
	}{
		{"hedged, the hedge wins", 0},
		{"a failure before the delay", 1},
		{"an answer before the delay", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var mu sync.Mutex
			var got []error
			_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: tc.size}, grpc.OnFinish(func(err error) {
				mu.Lock()
				got = append(got, err)
				mu.Unlock()
			}))
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 || status.Code(got[0]) != status.Code(err) {
				t.Errorf("OnFinish called with %v; want once, with the call's result %v", got, err)
			}
		})
	}
}

// TestUpgradeBodyKeepsWrite (issue 13, bug 15): the body of a 101 Switching Protocols
// answer that went through an armed hedge is still the connection, readable and
// writable.
func TestUpgradeBodyKeepsWrite(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		line, err := brw.ReadString('\n')
		if err != nil {
			return
		}
		brw.WriteString(line)
		brw.Flush()
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	rt := hedge.NewTransport(base, hedge.WithDelay(hedge.Delay{Initial: time.Minute}))

	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", resp.StatusCode)
	}
	rw, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		t.Fatalf("the 101 body %T lost its Write", resp.Body)
	}
	if _, err := io.WriteString(rw, "ping\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(rw).ReadString('\n')
	if err != nil || line != "ping\n" {
		t.Errorf("echo %q, %v; want ping", line, err)
	}
}
