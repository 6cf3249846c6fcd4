package connectkit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The procedures of the tests' service, pkg.Store: Get declares no side effects,
// Put is idempotent, Post declares nothing.
const (
	procGet  = "/pkg.Store/Get"
	procPut  = "/pkg.Store/Put"
	procPost = "/pkg.Store/Post"
)

type msg = wrapperspb.StringValue

// handlerFunc is one procedure's handler.
type handlerFunc func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error)

// protocols are the three connect-go speaks, as client options.
var protocols = []struct {
	name string
	opt  connect.ClientOption
}{
	{"connect", connect.WithClientOptions()},
	{"grpc", connect.WithGRPC()},
	{"grpcweb", connect.WithGRPCWeb()},
}

// serve starts a loopback HTTP/2 (TLS) server with the three procedures of pkg.Store,
// each handled by h with the handler options opts, and returns its URL and client.
func serve(t *testing.T, h handlerFunc, opts ...connect.HandlerOption) (string, *http.Client) {
	t.Helper()
	return serveWrapped(t, func(h http.Handler) http.Handler { return h }, h, opts...)
}

// client returns a connect client of procedure proc at url, declaring the
// procedure's idempotency as the generated code would.
func client(hc *http.Client, url, proc string, opts ...connect.ClientOption) *connect.Client[msg, msg] {
	level := connect.IdempotencyUnknown
	switch proc {
	case procGet:
		level = connect.IdempotencyNoSideEffects
	case procPut:
		level = connect.IdempotencyIdempotent
	}
	return connect.NewClient[msg, msg](hc, url+proc, append(opts, connect.WithIdempotency(level))...)
}

func ok(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
	return connect.NewResponse(wrapperspb.String("ok")), nil
}

// serveWrapped is serve with the server's handler wrapped by wrap (a counting
// middleware).
func serveWrapped(t *testing.T, wrap func(http.Handler) http.Handler, h handlerFunc, opts ...connect.HandlerOption) (string, *http.Client) {
	t.Helper()
	mux := http.NewServeMux()
	for _, p := range []struct {
		proc  string
		level connect.IdempotencyLevel
	}{{procGet, connect.IdempotencyNoSideEffects}, {procPut, connect.IdempotencyIdempotent}, {procPost, connect.IdempotencyUnknown}} {
		mux.Handle(p.proc, connect.NewUnaryHandler(p.proc, h, append(opts, connect.WithIdempotency(p.level))...))
	}
	srv := httptest.NewUnstartedServer(wrap(mux))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, srv.Client()
}
