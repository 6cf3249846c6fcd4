package propagate_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/deadlinekit/deadlinekit/propagate"
)

// BenchmarkHTTPRoundTrip compares one GET on a loopback server: the bare transport,
// through NewTransport, and through NewTransport to a server behind NewMiddleware.
// Run the variants in one invocation so they share the machine's state:
//
//	go test -run '^$' -bench 'HTTPRoundTrip|GRPCUnary' -count 8 ./propagate
func BenchmarkHTTPRoundTrip(b *testing.B) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	plain := httptest.NewServer(ok)
	defer plain.Close()
	guarded := httptest.NewServer(propagate.NewMiddleware()(ok))
	defer guarded.Close()
	base := http.DefaultTransport.(*http.Transport).Clone()
	defer base.CloseIdleConnections()

	for _, v := range []struct {
		name string
		rt   http.RoundTripper
		url  string
	}{
		{"bare", base, plain.URL},
		{"transport", propagate.NewTransport(base), plain.URL},
		{"transport+middleware", propagate.NewTransport(base), guarded.URL},
	} {
		b.Run(v.name, func(b *testing.B) {
			// A budget under the servers' 5-minute clamp, as real budgets are.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			client := &http.Client{Transport: v.rt}
			b.ReportAllocs()
			for b.Loop() {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, v.url, nil)
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}

type benchService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (benchService) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{}, nil
}

// BenchmarkGRPCUnary compares one unary call on a loopback server without
// interceptors and with propagate's client and server interceptors.
func BenchmarkGRPCUnary(b *testing.B) {
	for _, v := range []struct {
		name   string
		server []grpc.ServerOption
		client []grpc.DialOption
	}{
		{"bare", nil, nil},
		{"interceptors",
			[]grpc.ServerOption{grpc.UnaryInterceptor(propagate.UnaryServerInterceptor())},
			[]grpc.DialOption{grpc.WithUnaryInterceptor(propagate.UnaryClientInterceptor())}},
	} {
		b.Run(v.name, func(b *testing.B) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			gs := grpc.NewServer(v.server...)
			testgrpc.RegisterTestServiceServer(gs, benchService{})
			go gs.Serve(lis)
			defer gs.Stop()
			conn, err := grpc.NewClient(lis.Addr().String(),
				append(v.client, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			client := testgrpc.NewTestServiceClient(conn)
			// A budget under the servers' 5-minute clamp, as real budgets are.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			req := &testgrpc.SimpleRequest{}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.UnaryCall(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMiddlewareOnly measures the server middleware alone (no network).
func BenchmarkMiddlewareOnly(b *testing.B) {
	h := propagate.NewMiddleware()(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Grpc-Timeout", "250000u")
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, r)
	}
}
