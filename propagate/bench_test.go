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

	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/internal/pairbench"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
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

// BenchmarkTransportOnly measures NewTransport's own work on one request (derive the
// budget, copy the header map, stamp grpc-timeout, arm the dial hook) against a base
// that answers at once, so that no network noise hides it.
func BenchmarkTransportOnly(b *testing.B) {
	resp := &http.Response{StatusCode: 200, Body: http.NoBody}
	base := testkit.RoundTripFunc(func(*http.Request) (*http.Response, error) { return resp, nil })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://backend.test/x", nil)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "bench")
	for _, v := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"bare", base},
		{"transport", propagate.NewTransport(base)},
	} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.rt.RoundTrip(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPaired compares, call by call, a loopback HTTP GET through the bare
// transport with the same call through NewTransport (and to a server behind
// NewMiddleware), and a loopback gRPC unary call without and with the client and
// server interceptors. http/same runs the plain call on both sides, to show what the
// harness itself reads (about 0%):
//
//	go test -run '^$' -bench Paired -benchtime 20000x -count 5 ./propagate
func BenchmarkPaired(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Each hop's budget stays under the servers' 5-minute clamp.
	call := func(c *http.Client, url string) func() error {
		return func() error {
			cctx, ccancel := context.WithTimeout(ctx, time.Minute)
			defer ccancel()
			req, _ := http.NewRequestWithContext(cctx, http.MethodGet, url, nil)
			resp, err := c.Do(req)
			if err != nil {
				return err
			}
			io.Copy(io.Discard, resp.Body)
			return resp.Body.Close()
		}
	}
	httpPair := func(b *testing.B, transport func(http.RoundTripper) http.RoundTripper, server func(http.Handler) http.Handler) {
		ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
		plain := httptest.NewServer(ok)
		defer plain.Close()
		other := httptest.NewServer(server(ok))
		defer other.Close()
		t1 := http.DefaultTransport.(*http.Transport).Clone()
		t2 := http.DefaultTransport.(*http.Transport).Clone()
		defer t1.CloseIdleConnections()
		defer t2.CloseIdleConnections()
		pairbench.Run(b, call(&http.Client{Transport: t1}, plain.URL), call(&http.Client{Transport: transport(t2)}, other.URL))
	}
	same := func(h http.Handler) http.Handler { return h }
	withTransport := func(rt http.RoundTripper) http.RoundTripper { return propagate.NewTransport(rt) }
	b.Run("http/same", func(b *testing.B) {
		// The harness itself: a plain call on both sides; expect 0%.
		httpPair(b, func(rt http.RoundTripper) http.RoundTripper { return rt }, same)
	})
	b.Run("http/transport", func(b *testing.B) {
		httpPair(b, withTransport, same)
	})
	b.Run("http/transport+middleware", func(b *testing.B) {
		httpPair(b, withTransport, propagate.NewMiddleware())
	})
	b.Run("grpc", func(b *testing.B) {
		start := func(server []grpc.ServerOption, client []grpc.DialOption) (testgrpc.TestServiceClient, func()) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			gs := grpc.NewServer(server...)
			testgrpc.RegisterTestServiceServer(gs, benchService{})
			go gs.Serve(lis)
			conn, err := grpc.NewClient(lis.Addr().String(), append(client, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				b.Fatal(err)
			}
			return testgrpc.NewTestServiceClient(conn), func() { conn.Close(); gs.Stop() }
		}
		bare, stop1 := start(nil, nil)
		defer stop1()
		with, stop2 := start([]grpc.ServerOption{grpc.UnaryInterceptor(propagate.UnaryServerInterceptor())},
			[]grpc.DialOption{grpc.WithUnaryInterceptor(propagate.UnaryClientInterceptor())})
		defer stop2()
		unary := func(c testgrpc.TestServiceClient) func() error {
			return func() error {
				cctx, ccancel := context.WithTimeout(ctx, time.Minute)
				defer ccancel()
				_, err := c.UnaryCall(cctx, &testgrpc.SimpleRequest{})
				return err
			}
		}
		b.ReportAllocs()
		pairbench.Run(b, unary(bare), unary(with))
	})
}

// BenchmarkLevel measures what the level costs the transport and the middleware
// alone (no network): a request of the default level, which sends and reads no
// header, against one whose context is sheddable (the transport writes the header)
// or whose caller sent one (the middleware parses it and puts it on the context).
func BenchmarkLevel(b *testing.B) {
	resp := &http.Response{StatusCode: 200, Body: http.NoBody}
	base := testkit.RoundTripFunc(func(*http.Request) (*http.Response, error) { return resp, nil })
	rt := propagate.NewTransport(base)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, l := range []criticality.Level{criticality.Critical, criticality.Sheddable} {
		req, _ := http.NewRequestWithContext(criticality.With(ctx, l), http.MethodGet, "http://backend.test/x", nil)
		b.Run("transport/"+l.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := rt.RoundTrip(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	h := propagate.NewMiddleware()(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	w := httptest.NewRecorder()
	for _, v := range []string{"", "sheddable"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Grpc-Timeout", "250000u")
		name := "middleware/none"
		if v != "" {
			r.Header.Set(propagate.HeaderCriticality, v)
			name = "middleware/" + v
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, r)
			}
		})
	}
}
