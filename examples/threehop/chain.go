package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/deadlinekit/deadlinekit"
)

// hopFunc is one service's handler: its own work, then (for A and B) the call to the
// next hop. ctx is the request's context as the service's middleware left it.
type hopFunc func(ctx context.Context, next func(context.Context) error) error

// chainSpec describes one client → A (HTTP) → B (gRPC) → C (HTTP) chain: what each
// hop does and which toolkit layers sit on each server and each outbound edge. Nil
// layers mean "plain", as a service without the toolkit would be.
type chainSpec struct {
	a, b, c hopFunc

	serverA, serverC func(http.Handler) http.Handler
	serverB          []grpc.UnaryServerInterceptor

	clientToA func(http.RoundTripper) http.RoundTripper
	aToB      []grpc.UnaryClientInterceptor
	bToC      func(http.RoundTripper) http.RoundTripper
}

// chain is a running chain on loopback.
type chain struct {
	client *http.Client
	aURL   string
	stops  []func()
}

// hopService is B's gRPC service, registered by hand so the demo needs no generated
// code: /threehop.Hop/Work takes and returns google.protobuf.Empty.
const hopMethod = "/threehop.Hop/Work"

var hopService = grpc.ServiceDesc{
	ServiceName: "threehop.Hop",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Work",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := srv.(func(context.Context) error)
			call := func(ctx context.Context, _ any) (any, error) { return new(emptypb.Empty), h(ctx) }
			if interceptor == nil {
				return call(ctx, in)
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: hopMethod}, call)
		},
	}},
}

func identity[T any](v T) T { return v }

func orIdentity(f func(http.Handler) http.Handler) func(http.Handler) http.Handler {
	if f == nil {
		return identity[http.Handler]
	}
	return f
}

func orIdentityRT(f func(http.RoundTripper) http.RoundTripper) func(http.RoundTripper) http.RoundTripper {
	if f == nil {
		return identity[http.RoundTripper]
	}
	return f
}

// startChain starts C, B and A on 127.0.0.1 and returns the client side.
func startChain(tel *telemetry, spec chainSpec) (*chain, error) {
	ch := &chain{}
	fail := func(err error) (*chain, error) { ch.stop(); return nil, err }

	newTransport := func() *http.Transport {
		t := http.DefaultTransport.(*http.Transport).Clone()
		ch.stops = append(ch.stops, t.CloseIdleConnections)
		return t
	}

	// C: HTTP.
	cURL, stop, err := serveHTTP(tel.serverHandler(svcC, orIdentity(spec.serverC)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeResult(w, spec.c(r.Context(), nil))
	}))))
	if err != nil {
		return fail(err)
	}
	ch.stops = append(ch.stops, stop)

	// B: gRPC, calls C over HTTP.
	bToC := &http.Client{Transport: tel.transport(svcB, orIdentityRT(spec.bToC)(newTransport()))}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	gs := grpc.NewServer(append(tel.grpcServerOptions(svcB), grpc.ChainUnaryInterceptor(spec.serverB...))...)
	gs.RegisterService(&hopService, func(ctx context.Context) error {
		return deadlinekit.GRPCError(ctx, spec.b(ctx, func(ctx context.Context) error { return httpGet(ctx, bToC, cURL) }))
	})
	go gs.Serve(lis)
	ch.stops = append(ch.stops, gs.Stop)

	// A: HTTP, calls B over gRPC.
	conn, err := grpc.NewClient(lis.Addr().String(), append(tel.grpcDialOptions(svcA),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(spec.aToB...))...)
	if err != nil {
		return fail(err)
	}
	ch.stops = append(ch.stops, func() { conn.Close() })
	conn.Connect()
	aURL, stop, err := serveHTTP(tel.serverHandler(svcA, orIdentity(spec.serverA)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeResult(w, spec.a(r.Context(), func(ctx context.Context) error {
			return conn.Invoke(ctx, hopMethod, new(emptypb.Empty), new(emptypb.Empty))
		}))
	}))))
	if err != nil {
		return fail(err)
	}
	ch.stops = append(ch.stops, stop)
	ch.aURL = aURL
	ch.client = &http.Client{Transport: tel.transport(svcClient, orIdentityRT(spec.clientToA)(newTransport()))}
	return ch, nil
}

// call sends one user request to A.
func (ch *chain) call(ctx context.Context) error { return httpGet(ctx, ch.client, ch.aURL) }

// stop stops the chain, waiting for handlers still running; it may be called again.
func (ch *chain) stop() {
	for i := len(ch.stops) - 1; i >= 0; i-- {
		ch.stops[i]()
	}
	ch.stops = nil
}

func serveHTTP(h http.Handler) (url string, stop func(), err error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(lis)
	stop = func() {
		// Let handlers still running finish (they record what they did), but
		// not for ever.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			srv.Close()
		}
	}
	return "http://" + lis.Addr().String(), stop, nil
}

// Errors travel between the hops as a status: an HTTP status on HTTP hops, a gRPC code
// on B, translated by the toolkit's one-liners (deadlinekit.FromHTTP, GRPCError,
// WriteHTTPError), as a real service would.

func httpGet(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err := deadlinekit.FromHTTP(resp, err); err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// writeResult answers an HTTP hop's request: "ok", or err's status.
func writeResult(w http.ResponseWriter, err error) {
	if err != nil {
		deadlinekit.WriteHTTPError(w, err)
		return
	}
	io.WriteString(w, "ok\n")
}

// statusOf is the HTTP status a hop's failure came back with, or 0.
func statusOf(err error) int {
	var we *deadlinekit.WireError
	if errors.As(err, &we) {
		return we.HTTPStatus
	}
	return 0
}
