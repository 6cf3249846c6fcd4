// Package stackcmp_test compares the cost of deadlinekit's whole stack on one
// loopback call with failsafe-go's retry + circuit breaker + hedge stack on the same
// call, each paired call by call with the bare call (package pairbench), on gRPC and
// on HTTP.
//
//	cd bench && go test -run '^$' -bench StackPeers -benchtime 20000x -count 3 ./stackcmp
package stackcmp_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafegrpc"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/internal/pairbench"
)

const method = "/grpc.testing.TestService/UnaryCall"

// stack is one contender: the client side, and the server side (none for
// failsafe-go, which has no server side for these promises).
type stack struct {
	name   string
	dial   func() []grpc.DialOption
	serve  func() []grpc.ServerOption
	rt     func(http.RoundTripper) http.RoundTripper
	handle func(http.Handler) http.Handler
}

// stacks returns deadlinekit's constructors with their defaults, and failsafe-go's
// retry (its gRPC and HTTP defaults: 3 attempts) → circuit breaker (defaults) →
// hedge (after the P99 of the last 1000 calls, once 100 are known), outermost first.
func stacks() []stack {
	return []stack{
		{
			name:   "deadlinekit",
			dial:   func() []grpc.DialOption { return deadlinekit.DialOptions(deadlinekit.WithIdempotentMethods(method)) },
			serve:  func() []grpc.ServerOption { return deadlinekit.ServerOptions() },
			rt:     func(rt http.RoundTripper) http.RoundTripper { return deadlinekit.NewTransport(rt) },
			handle: func(h http.Handler) http.Handler { return deadlinekit.NewHandler(h) },
		},
		{
			name: "failsafe-go",
			dial: func() []grpc.DialOption {
				return []grpc.DialOption{grpc.WithUnaryInterceptor(failsafegrpc.NewUnaryClientInterceptor(
					failsafegrpc.NewRetryPolicyBuilder[*testgrpc.SimpleResponse]().Build(),
					circuitbreaker.NewWithDefaults[*testgrpc.SimpleResponse](),
					hedgepolicy.NewWithDelayQuantile[*testgrpc.SimpleResponse](0.99, 1000, 100)))}
			},
			rt: func(rt http.RoundTripper) http.RoundTripper {
				return failsafehttp.NewRoundTripper(rt, failsafehttp.NewRetryPolicyBuilder().Build(),
					circuitbreaker.NewWithDefaults[*http.Response](),
					hedgepolicy.NewWithDelayQuantile[*http.Response](0.99, 1000, 100))
			},
		},
	}
}

// BenchmarkStackPeers pairs, for each contender, the call through its stack with
// the bare call, untraced, on a loopback gRPC unary call and on a loopback HTTP/1.1
// GET; then the two stacks with each other ("vs": failsafe-go's the base,
// deadlinekit's the with: a negative added-% is deadlinekit's stack costing less).
func BenchmarkStackPeers(b *testing.B) {
	dk, fs := stacks()[0], stacks()[1]
	b.Run("grpc/vs", func(b *testing.B) {
		base := startGRPC(b, nil, fs.dial())
		with := startGRPC(b, dk.serve(), dk.dial())
		b.ReportAllocs()
		pairbench.Run(b, base, with)
	})
	b.Run("http/vs", func(b *testing.B) {
		base := startHTTP(b, fs.rt, nil)
		with := startHTTP(b, dk.rt, dk.handle)
		b.ReportAllocs()
		pairbench.Run(b, base, with)
	})
	// The client sides alone: failsafe-go has no server side.
	b.Run("grpc/vs-client", func(b *testing.B) {
		base := startGRPC(b, nil, fs.dial())
		with := startGRPC(b, nil, dk.dial())
		b.ReportAllocs()
		pairbench.Run(b, base, with)
	})
	b.Run("http/vs-client", func(b *testing.B) {
		base := startHTTP(b, fs.rt, nil)
		with := startHTTP(b, dk.rt, nil)
		b.ReportAllocs()
		pairbench.Run(b, base, with)
	})
	for _, s := range stacks() {
		b.Run("grpc/"+s.name, func(b *testing.B) {
			bare := startGRPC(b, nil, nil)
			var sopts []grpc.ServerOption
			if s.serve != nil {
				sopts = s.serve()
			}
			with := startGRPC(b, sopts, s.dial())
			b.ReportAllocs()
			pairbench.Run(b, bare, with)
		})
	}
	for _, s := range stacks() {
		b.Run("http/"+s.name, func(b *testing.B) {
			bare := startHTTP(b, nil, nil)
			with := startHTTP(b, s.rt, s.handle)
			b.ReportAllocs()
			pairbench.Run(b, bare, with)
		})
	}
}

type okService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (okService) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{}, nil
}

// startGRPC starts a loopback gRPC server and a client of its own, with the
// options given, and returns one unary call under a one-minute budget.
func startGRPC(b *testing.B, sopts []grpc.ServerOption, copts []grpc.DialOption) func() error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer(sopts...)
	testgrpc.RegisterTestServiceServer(gs, okService{})
	go gs.Serve(lis)
	b.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), append(copts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	client := testgrpc.NewTestServiceClient(conn)
	req := &testgrpc.SimpleRequest{}
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := client.UnaryCall(ctx, req)
		return err
	}
}

// startHTTP starts a loopback HTTP server answering "ok" behind handle (if not nil)
// and a client of its own connections behind rt (if not nil), and returns one GET
// under a one-minute budget, its body read and closed.
func startHTTP(b *testing.B, rt func(http.RoundTripper) http.RoundTripper, handle func(http.Handler) http.Handler) func() error {
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	if handle != nil {
		h = handle(h)
	}
	var base http.RoundTripper = &http.Transport{MaxIdleConnsPerHost: 4}
	if rt != nil {
		base = rt(base)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(lis)
	b.Cleanup(func() { srv.Close() })
	c := &http.Client{Transport: base}
	b.Cleanup(c.CloseIdleConnections)
	url := "http://" + lis.Addr().String() + "/item"
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return err
	}
}
