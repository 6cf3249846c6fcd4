package deadlinekit

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/internal/idempotency"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/internal/rpc"
)

// outgoingKeyError is the refusal of a call whose outgoing idempotency-key metadata
// (a key the handler forwarded from its caller, say) dedup would refuse, or grpc-go
// could not send (a character outside ASCII: grpc-go's own refusal is Internal):
// InvalidArgument with [dedup.ParseKey]'s reason, which names the character. Nil for
// a call without a key, or with a well-formed one.
func outgoingKeyError(ctx context.Context) error {
	vs := metadata.ValueFromOutgoingContext(ctx, idempotency.Key)
	if len(vs) == 0 || (len(vs) == 1 && !idempotency.Keyed(vs)) {
		return nil // no key: a blank one is none
	}
	if _, err := dedup.ParseKey(vs); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

// unaryKeyCheck refuses, before any layer sends it, a unary call whose outgoing key
// is malformed ([outgoingKeyError]).
func unaryKeyCheck(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if err := outgoingKeyError(ctx); err != nil {
		return err
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// streamKeyCheck is [unaryKeyCheck] for streams.
func streamKeyCheck(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if err := outgoingKeyError(ctx); err != nil {
		return nil, err
	}
	return streamer(ctx, desc, cc, method, opts...)
}

// edgeUnaryOuter is the edge's outermost unary interceptor ([WithEdge]): the key
// check, the transport stream that keeps internal metadata from the caller, and
// the layers' refusals in public words.
func edgeUnaryOuter(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := incomingKeyError(ctx); err != nil {
		return nil, err
	}
	ctx, st := withEdge(ctx)
	resp, err := handler(ctx, req)
	if err == nil || st.replayed.Load() || st.fromHandler(err) {
		return resp, err
	}
	return nil, st.publicStatus(err)
}

// edgeUnaryInner is the edge's innermost unary interceptor: it notes the error the
// handler itself returned.
func edgeUnaryInner(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if st := edgeOf(ctx); st != nil {
		st.handlerErr = err
		st.handler.Store(true)
	}
	return resp, err
}

// edgeStreamOuter is [edgeUnaryOuter] for streams.
func edgeStreamOuter(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := incomingKeyError(ss.Context()); err != nil {
		return err
	}
	ctx, st := withEdge(ss.Context())
	err := handler(srv, &edgeServerStream{ServerStream: ss, ctx: ctx, st: st})
	if err == nil || st.fromHandler(err) {
		return err
	}
	return st.publicStatus(err)
}

// edgeStreamInner is [edgeUnaryInner] for streams.
func edgeStreamInner(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	err := handler(srv, ss)
	if st := edgeOf(ss.Context()); st != nil {
		st.handlerErr = err
		st.handler.Store(true)
	}
	return err
}

// incomingKeyError refuses a call whose idempotency-key metadata [dedup.ParseKey]
// refuses: InvalidArgument with the reason.
func incomingKeyError(ctx context.Context) error {
	vs := metadata.ValueFromIncomingContext(ctx, idempotency.Key)
	if len(vs) == 0 {
		return nil
	}
	if _, err := dedup.ParseKey(vs); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

// withEdge returns ctx with the edge's state, and a transport stream that strips
// internal metadata.
func withEdge(ctx context.Context) (context.Context, *edgeState) {
	st := &edgeState{}
	ctx = context.WithValue(ctx, edgeKey{}, st)
	if ts := grpc.ServerTransportStreamFromContext(ctx); ts != nil {
		ctx = grpc.NewContextWithServerTransportStream(ctx, &edgeTransportStream{ServerTransportStream: ts, st: st})
	}
	st.ctx = ctx
	return ctx, st
}

// fromHandler reports whether err is the handler's own answer (also when a layer
// passed it on as another error with the same status).
func (st *edgeState) fromHandler(err error) bool {
	if !st.handler.Load() || st.handlerErr == nil {
		return false
	}
	if err == st.handlerErr {
		return true
	}
	a, b := status.Convert(err), status.Convert(st.handlerErr)
	return a.Code() == b.Code() && a.Message() == b.Message()
}

// publicStatus is a layer's refusal err in [Public]'s words, with its code, its
// details (RetryInfo among them) and RetryInfo for a wait. The layer's pushback
// trailer, which the edge does not send, tells a refusal for lack of time.
func (st *edgeState) publicStatus(err error) error {
	x := toWire(err)
	if v, ok := st.pushback.Load().(string); ok && x.pushback == 0 {
		if p, perr := pushback.ParseMs(v); perr == nil {
			x.pushback = p
		} else {
			x.pushback = -1
		}
	}
	return &grpcError{st: wireStatus(x.st, x.code, publicText(err, x), comeBack(x.pushback, x.comeBack)), err: err}
}

// publicMD is md without the toolkit's internal keys; it notes dedup's replay marker.
func (st *edgeState) publicMD(md metadata.MD) metadata.MD {
	var out metadata.MD
	for k := range md {
		if k == dedup.ReplayedKey {
			st.replayed.Store(true)
		}
		if k == pushback.Key && len(md[k]) > 0 {
			st.pushback.Store(md[k][0])
		}
		if internalHeader(k) {
			if out == nil {
				out = md.Copy()
			}
			delete(out, k)
		}
	}
	if out == nil {
		return md
	}
	return out
}

// edgeTransportStream strips internal metadata from what a unary call sends.
type edgeTransportStream struct {
	grpc.ServerTransportStream
	st *edgeState
}

func (s *edgeTransportStream) SetHeader(md metadata.MD) error {
	return s.ServerTransportStream.SetHeader(s.st.publicMD(md))
}

func (s *edgeTransportStream) SendHeader(md metadata.MD) error {
	return s.ServerTransportStream.SendHeader(s.st.publicMD(md))
}

func (s *edgeTransportStream) SetTrailer(md metadata.MD) error {
	return s.ServerTransportStream.SetTrailer(s.st.publicMD(md))
}

// edgeServerStream strips internal metadata from what a stream sends.
type edgeServerStream struct {
	grpc.ServerStream
	ctx context.Context
	st  *edgeState
}

func (s *edgeServerStream) Context() context.Context { return s.ctx }

func (s *edgeServerStream) SetHeader(md metadata.MD) error {
	return s.ServerStream.SetHeader(s.st.publicMD(md))
}

func (s *edgeServerStream) SendHeader(md metadata.MD) error {
	return s.ServerStream.SendHeader(s.st.publicMD(md))
}

func (s *edgeServerStream) SetTrailer(md metadata.MD) {
	s.ServerStream.SetTrailer(s.st.publicMD(md))
}

// edgeRPCOuter is the edge's outermost layer for frameworks the library does not
// import (connectkit's HandlerOption): the key check, and the layers' refusals in
// public words, without their internal metadata. Each layer there answers its
// refusal as the framework's error, with the metadata on it.
func edgeRPCOuter(ctx context.Context, in *rpc.Inbound, handle rpc.Handle) (any, error) {
	if vs, ok := in.Header[idempotency.Header]; ok {
		if _, err := dedup.ParseKey(vs); err != nil {
			return nil, &rpc.Refusal{Err: &grpcError{st: status.New(codes.InvalidArgument, err.Error()), err: err}}
		}
	}
	ctx, st := withEdge(ctx)
	resp, err := handle(ctx)
	if err == nil || st.fromHandler(err) {
		return resp, err
	}
	var m interface{ Meta() http.Header }
	if errors.As(err, &m) {
		if m.Meta().Get(dedup.ReplayedHeader) != "" {
			return resp, err // a stored answer
		}
		if v := m.Meta().Get(pushback.Key); v != "" {
			st.pushback.Store(v)
		}
	}
	return nil, &rpc.Refusal{Err: st.publicStatus(err)}
}

// edgeRPCInner is the edge's innermost layer there: it notes the handler's own error.
func edgeRPCInner(ctx context.Context, _ *rpc.Inbound, handle rpc.Handle) (any, error) {
	resp, err := handle(ctx)
	if st := edgeOf(ctx); st != nil {
		st.handlerErr = err
		st.handler.Store(true)
	}
	return resp, err
}
