package deadlinekit

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/internal/record"
	"github.com/deadlinekit/deadlinekit/internal/rpc"
)

// WithCriticality makes f decide the level (package criticality) of every request
// the server serves, in [NewHandler], [ServerOptions] and connectkit's
// HandlerOption: f runs just inside propagate, so that the guard and the handler,
// and every call the handler makes through the stack, see its answer
// (criticality.From); the level goes on the server span (deadlinekit.criticality).
//
// One function serves every protocol: a gRPC or connect call is given to f as the
// HTTP request it is, POST to the full method ("/shop.Cart/Checkout") with the
// call's metadata as its header, so that a route, a method and a header are read
// alike:
//
//	deadlinekit.WithCriticality(func(r *http.Request) criticality.Level {
//		switch {
//		case r.URL.Path == "/shop.Cart/Checkout", strings.HasPrefix(r.URL.Path, "/checkout/"):
//			return criticality.CriticalPlus
//		case r.Header.Get("Sec-Purpose") == "prefetch": // a browser's prefetch
//			return criticality.Sheddable
//		}
//		return criticality.Critical
//	})
//
// f must not keep or change r. On a server that is not an edge, r.Context()
// carries the level a trusted caller sent (propagate reads it; Critical when none
// came), which f may keep (return criticality.From(r.Context())), lower or raise.
// At an edge ([WithEdge]) no caller is trusted: the level header end users send is
// removed before any layer reads it, and a request's level is f's, or Critical
// without f.
//
// Default: no f; the level is the one a trusted caller sent, or Critical.
func WithCriticality(f func(r *http.Request) criticality.Level) Option {
	return optionFunc(func(c *config) { c.level = f })
}

// setLevel puts the level f gives r on ctx, r's context, and on its server span.
func setLevel(ctx context.Context, f func(*http.Request) criticality.Level, r *http.Request) context.Context {
	l := criticality.From(criticality.With(ctx, f(r))) // clamped to a level
	record.Criticality(ctx, l)
	if l == criticality.From(ctx) {
		return ctx
	}
	return criticality.With(ctx, l)
}

// levelHTTP is the layer of [WithCriticality] for [NewHandler].
func levelHTTP(f func(*http.Request) criticality.Level, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ctx := setLevel(r.Context(), f, r); ctx != r.Context() {
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(w, r)
	})
}

// callRequest is the gRPC or connect call to method, under ctx with header h
// (host: the :authority, when known), as the HTTP request it is.
func callRequest(ctx context.Context, method, host string, h http.Header) *http.Request {
	r := &http.Request{
		Method: http.MethodPost, URL: &url.URL{Path: method}, RequestURI: method,
		Proto: "HTTP/2.0", ProtoMajor: 2, Header: h, Host: host,
	}
	return r.WithContext(ctx)
}

// grpcRequest is the gRPC call to method under ctx as the HTTP request it is: its
// incoming metadata as the header (binary values and pseudo-headers left out).
func grpcRequest(ctx context.Context, method string) *http.Request {
	md, _ := metadata.FromIncomingContext(ctx)
	h := make(http.Header, len(md))
	var host string
	for k, vs := range md {
		switch {
		case k == ":authority" && len(vs) > 0:
			host = vs[0]
		case strings.HasPrefix(k, ":"), strings.HasSuffix(k, "-bin"):
		default:
			h[http.CanonicalHeaderKey(k)] = vs
		}
	}
	return callRequest(ctx, method, host, h)
}

// levelUnary and levelStream are the layer of [WithCriticality] for [ServerOptions].
func levelUnary(f func(*http.Request) criticality.Level) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return handler(setLevel(ctx, f, grpcRequest(ctx, info.FullMethod)), req)
	}
}

func levelStream(f func(*http.Request) criticality.Level) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		if lctx := setLevel(ctx, f, grpcRequest(ctx, info.FullMethod)); lctx != ctx {
			ss = &levelServerStream{ServerStream: ss, ctx: lctx}
		}
		return handler(srv, ss)
	}
}

type levelServerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *levelServerStream) Context() context.Context { return s.ctx }

// levelRPC is the layer of [WithCriticality] for connectkit's HandlerOption.
func levelRPC(f func(*http.Request) criticality.Level) rpc.Server {
	return func(ctx context.Context, in *rpc.Inbound, handle rpc.Handle) (any, error) {
		return handle(setLevel(ctx, f, callRequest(ctx, in.Procedure, "", in.Header)))
	}
}

// The edge's distrust ([WithEdge]): the level header an end user sends is removed
// before any layer reads it, and the handler never forwards it.

func edgeDropLevelHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Header[criticality.Header]; ok {
			r = r.WithContext(r.Context())
			r.Header = r.Header.Clone()
			delete(r.Header, criticality.Header)
		}
		next.ServeHTTP(w, r)
	})
}

// dropIncomingLevel returns ctx without the level in its incoming metadata.
func dropIncomingLevel(ctx context.Context) context.Context {
	if len(metadata.ValueFromIncomingContext(ctx, criticality.MetadataKey)) == 0 {
		return ctx
	}
	md, _ := metadata.FromIncomingContext(ctx)
	md = md.Copy()
	delete(md, criticality.MetadataKey)
	return metadata.NewIncomingContext(ctx, md)
}

func edgeDropLevelUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return handler(dropIncomingLevel(ctx), req)
}

func edgeDropLevelStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if ctx := dropIncomingLevel(ss.Context()); ctx != ss.Context() {
		ss = &levelServerStream{ServerStream: ss, ctx: ctx}
	}
	return handler(srv, ss)
}

func edgeDropLevelRPC(ctx context.Context, in *rpc.Inbound, handle rpc.Handle) (any, error) {
	in.Header.Del(criticality.Header)
	return handle(ctx)
}
