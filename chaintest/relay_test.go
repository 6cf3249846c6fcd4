package chaintest_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// shop is a three-hop chain of separate servers, as a user builds it from the
// README: the user's HTTP client → gateway (HTTP) → orders (gRPC) → inventory
// (HTTP), every hop with the root constructors, each relaying its downstream's
// failure with the README's one-liners. PlaceOrder (the interop UnaryCall) is
// declared nowhere as idempotent; the gateway's POST /order is a write.
type shop struct {
	user      *http.Client
	gateway   string
	ordersRun atomic.Int32 // orders' handler runs
	invRun    atomic.Int32 // inventory's handler runs
	ordersTr  chan metadata.MD
}

type orders struct {
	testgrpc.UnimplementedTestServiceServer
	s      *shop
	client *http.Client
	inv    string
}

func (o *orders) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	o.s.ordersRun.Add(1)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, o.inv+"/reserve", strings.NewReader("tea"))
	resp, err := o.client.Do(req)
	if err := deadlinekit.FromHTTP(resp, err); err != nil {
		return nil, deadlinekit.GRPCError(ctx, err)
	}
	resp.Body.Close()
	return &testgrpc.SimpleResponse{}, nil
}

// newShop starts the chain; inventory is h, or a closed port when h is nil.
func newShop(t *testing.T, h http.HandlerFunc, serverOpts ...deadlinekit.Option) *shop {
	t.Helper()
	return newShopClient(t, h, nil, serverOpts...)
}

// newShopClient is newShop with orders' client to inventory built with clientOpts.
func newShopClient(t *testing.T, h http.HandlerFunc, clientOpts []deadlinekit.Option, serverOpts ...deadlinekit.Option) *shop {
	t.Helper()
	s := &shop{ordersTr: make(chan metadata.MD, 100)}
	inv := "http://" + testkit.ClosedAddr(t)
	if h != nil {
		srv := httptest.NewServer(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.invRun.Add(1)
			h(w, r)
		})))
		t.Cleanup(srv.Close)
		inv = srv.URL
	}
	toInv := stackClient(t, clientOpts...)

	gs := grpc.NewServer(deadlinekit.ServerOptions(serverOpts...)...)
	testgrpc.RegisterTestServiceServer(gs, &orders{s: s, client: toInv, inv: inv})
	conn := dial(t, serveGRPC(t, gs), deadlinekit.DialOptions()...)
	toOrders := testgrpc.NewTestServiceClient(conn)

	mux := http.NewServeMux()
	mux.HandleFunc("POST /order", func(w http.ResponseWriter, r *http.Request) {
		var tr metadata.MD
		_, err := toOrders.UnaryCall(r.Context(), &testgrpc.SimpleRequest{}, grpc.Trailer(&tr))
		s.ordersTr <- tr
		if err != nil {
			deadlinekit.WriteHTTPError(w, deadlinekit.FromGRPC(err, &tr))
			return
		}
		io.WriteString(w, "ordered")
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	gw := httptest.NewServer(deadlinekit.NewHandler(mux))
	t.Cleanup(gw.Close)
	s.gateway = gw.URL
	s.user = stackClient(t)
	return s
}

func (s *shop) do(t *testing.T, method, path string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, s.gateway+path, nil)
	resp, err := s.user.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// A write whose downstream answers 503 runs once at every hop: the 503 relayed as
// UNAVAILABLE is orders' answer, not a failure to reach orders, and PlaceOrder may
// not run twice.
func TestChainWriteRunsOnce(t *testing.T) {
	s := newShop(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "inventory: stock database down", http.StatusServiceUnavailable)
	})
	resp := s.do(t, http.MethodPost, "/order")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("user got %d, want 503", resp.StatusCode)
	}
	if n := s.ordersRun.Load(); n != 1 {
		t.Errorf("orders' handler ran %d times for one write; want 1", n)
	}
	if n := s.invRun.Load(); n != 1 {
		t.Errorf("inventory's handler ran %d times for one write; want 1", n)
	}
}

// grpc-go's interop UnaryCall whose handler answers UNAVAILABLE runs once under
// DialOptions, as without the toolkit; an attempt that never reached a server (a
// closed port) is still retried.
func TestUnavailableAnswerOfAWriteIsNotResent(t *testing.T) {
	var runs atomic.Int32
	gs := grpc.NewServer(deadlinekit.ServerOptions()...)
	testgrpc.RegisterTestServiceServer(gs, unavailableServer{runs: &runs})
	conn := dial(t, serveGRPC(t, gs), deadlinekit.DialOptions()...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := testgrpc.NewTestServiceClient(conn).UnaryCall(ctx, &testgrpc.SimpleRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v, want Unavailable", err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times; want 1", n)
	}

	var attempts atomic.Int32
	dead := dial(t, testkit.ClosedAddr(t), append(deadlinekit.DialOptions(deadlinekit.Without(deadlinekit.Breaker)),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			attempts.Add(1)
			return invoker(ctx, method, req, reply, cc, opts...)
		}))...)
	_, err = testgrpc.NewTestServiceClient(dead).UnaryCall(ctx, &testgrpc.SimpleRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v, want Unavailable", err)
	}
	if n := attempts.Load(); n < 2 {
		t.Errorf("a write that never left the client was sent %d times; want it retried", n)
	}
}

type unavailableServer struct {
	testgrpc.UnimplementedTestServiceServer
	runs *atomic.Int32
}

func (u unavailableServer) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	u.runs.Add(1)
	return nil, status.Error(codes.Unavailable, "the handler did the work, then failed")
}

// A POST refused by the guard's admission queue (the handler did not run) is sent
// again after the wait the server named: the refusal says the handler did not run.
func TestGuardRefusalOfAWriteIsResent(t *testing.T) {
	release := make(chan struct{})
	var refused atomic.Int32
	var ran atomic.Int32
	h := deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ran.Add(1) == 1 {
			select { // hold the only slot
			case <-release:
			case <-r.Context().Done():
			}
		}
	}), deadlinekit.WithShortCircuit(shortcircuit.WithMaxConcurrency(1), shortcircuit.WithQueue(0, shortcircuit.FIFO)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &codeWriter{ResponseWriter: w}
		h.ServeHTTP(rw, r)
		if rw.code == http.StatusServiceUnavailable && refused.Add(1) == 1 {
			close(release)
		}
	}))
	defer srv.Close()
	go http.Get(srv.URL) // takes the slot
	for ran.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	client := stackClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("order"))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || refused.Load() != 1 {
		t.Errorf("POST refused by the guard: status %d after %d refusals; want 200 after 1 (resent)", resp.StatusCode, refused.Load())
	}
}

type codeWriter struct {
	http.ResponseWriter
	code int
}

func (w *codeWriter) WriteHeader(c int) {
	if w.code == 0 {
		w.code = c
	}
	w.ResponseWriter.WriteHeader(c)
}

func (w *codeWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// While inventory is down, orders' circuit on it opens and the gateway relays the
// refusal. The gateway is up: the user's breaker never opens on it, its healthy
// routes keep answering, and orders' trailer holds one value per signal.
func TestChainRelayKeepsTheGatewayOpen(t *testing.T) {
	s := newShop(t, nil)
	multi := 0
	for i := range 60 {
		resp := s.do(t, http.MethodPost, "/order")
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("order %d succeeded with inventory down", i)
		}
		tr := <-s.ordersTr
		if v := tr.Get("grpc-retry-pushback-ms"); len(v) > 1 {
			if multi++; multi == 1 {
				t.Errorf("order %d: orders' trailer has %d values of grpc-retry-pushback-ms: %q; want at most one", i, len(v), v)
			}
		}
	}
	if n := s.ordersRun.Load(); n != 60 {
		t.Errorf("orders' handler ran %d times for 60 orders; want 60 (nobody retries what a lower layer retried)", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.gateway+"/health", nil)
	resp, err := s.user.Do(req)
	if errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("the user's circuit on the healthy gateway opened: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /health: %d", resp.StatusCode)
	}
}
