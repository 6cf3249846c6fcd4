package connectkit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	"github.com/deadlinekit/deadlinekit/internal/record"
	"github.com/deadlinekit/deadlinekit/internal/rpc"
)

// interceptor is one layer as a connect.Interceptor: its client side (nil: none) for
// the calls of a connect client, its server side (nil: none) for the calls a connect
// handler serves.
type interceptor struct {
	client rpc.Client
	server rpc.Server
	// stream and admit are the layer's client side for streams (nil: streams go
	// through).
	stream rpc.StreamClient
	admit  rpc.StreamAdmit
	// resends: the client side may send a call more than once, or several copies
	// at once; each send then gets a request of its own.
	resends bool
}

var _ connect.Interceptor = (*interceptor)(nil)

func (i *interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		switch {
		case spec.IsClient && i.client != nil:
			return i.unaryClient(ctx, req, next)
		case !spec.IsClient && i.server != nil:
			return i.unaryServer(ctx, req, next)
		}
		return next(ctx, req)
	}
}

func (i *interceptor) unaryClient(ctx context.Context, req connect.AnyRequest, next connect.UnaryFunc) (connect.AnyResponse, error) {
	spec := req.Spec()
	call := rpc.Call{
		Procedure:  spec.Procedure,
		Target:     req.Peer().Addr,
		Idempotent: spec.IdempotencyLevel == connect.IdempotencyNoSideEffects || spec.IdempotencyLevel == connect.IdempotencyIdempotent,
	}
	send := func(actx context.Context) rpc.Answer {
		resp, err := next(actx, req)
		return answer(resp, err)
	}
	if i.resends {
		// Every attempt sends a copy of its own; req itself, a copy nobody sends,
		// is what they are copied from. A layer that sends once passes on the
		// request it was given: a copy already, when a layer above resends.
		req = shallowCopy(req)
		send = func(actx context.Context) rpc.Answer {
			resp, err := next(actx, attempt(actx, req))
			return answer(resp, err)
		}
	}
	a := i.client(ctx, &call, send)
	if a.Err != nil {
		return nil, clientError(a)
	}
	resp, _ := a.Resp.(connect.AnyResponse)
	return resp, nil
}

func (i *interceptor) unaryServer(ctx context.Context, req connect.AnyRequest, next connect.UnaryFunc) (connect.AnyResponse, error) {
	in := rpc.Inbound{Procedure: req.Spec().Procedure, Header: req.Header(), Req: req.Any(), Reply: replies}
	var resp connect.AnyResponse
	out, err := i.server(ctx, &in, func(ctx context.Context) (any, error) {
		var err error
		resp, err = next(ctx, req)
		return resp, err
	})
	if err != nil {
		return nil, layerError(err)
	}
	if made, ok := out.(connect.AnyResponse); ok && made != nil && resp == nil {
		return made, nil // a layer answered without the handler (dedup's replay)
	}
	return resp, nil
}

func (i *interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	switch {
	case i.stream != nil:
		return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
			sctx, end, err := i.stream(ctx, &rpc.Call{Procedure: spec.Procedure})
			if err != nil {
				return &refusedStream{StreamingClientConn: next(ctx, spec), err: clientError(rpc.Answer{Err: err})}
			}
			return &endingStream{StreamingClientConn: next(sctx, spec), end: end}
		}
	case i.admit != nil:
		return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
			return &admittingStream{StreamingClientConn: next(ctx, spec), ctx: ctx, admit: i.admit}
		}
	}
	return next
}

func (i *interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	if i.server == nil {
		return next
	}
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		in := rpc.Inbound{Procedure: conn.Spec().Procedure, Header: conn.RequestHeader(), Stream: true}
		_, err := i.server(ctx, &in, func(ctx context.Context) (any, error) { return nil, next(ctx, conn) })
		if err != nil {
			return layerError(err)
		}
		return nil
	}
}

// attempt is the request one attempt sends: a copy of req with a header of its own,
// carrying what the layers added (ctx's outgoing metadata: the attempt count, an
// idempotency key) and the attempt span's trace context. connect-go writes each send's timeout header into the header it
// sends, and each send's HTTP method into the request, so attempts in flight at once
// (hedges) must not share them; the message is shared, and only read.
func attempt(ctx context.Context, req connect.AnyRequest) connect.AnyRequest {
	h := req.Header().Clone()
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		for k, vs := range md {
			if !strings.HasSuffix(k, "-bin") {
				h[http.CanonicalHeaderKey(k)] = vs
			}
		}
	}
	// The attempt's span is the downstream's parent, not the call's that otelconnect
	// wrote into the caller's header.
	record.InjectHTTP(ctx, h)
	return &attemptRequest{AnyRequest: shallowCopy(req), header: h}
}

// attemptRequest is one attempt's copy of a unary request.
type attemptRequest struct {
	connect.AnyRequest
	header http.Header
}

func (r *attemptRequest) Header() http.Header { return r.header }

// shallowCopy returns a copy of the *connect.Request[T] behind req, sharing its
// message, so that what connect-go writes into one attempt's request (its HTTP
// method) does not race with another's.
func shallowCopy(req connect.AnyRequest) connect.AnyRequest {
	if a, ok := req.(*attemptRequest); ok {
		return &attemptRequest{AnyRequest: shallowCopy(a.AnyRequest), header: a.header.Clone()}
	}
	v := reflect.ValueOf(req)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return req
	}
	c := reflect.New(v.Elem().Type())
	c.Elem().Set(v.Elem())
	return c.Interface().(connect.AnyRequest)
}

// answer is what an attempt came back with, in the layers' terms: a connect error's
// code as a gRPC status (its message and details with it), and its metadata
// (headers and trailers) as lower-case keys.
func answer(resp connect.AnyResponse, err error) rpc.Answer {
	if err == nil {
		return rpc.Answer{Resp: resp}
	}
	a := rpc.Answer{Err: err}
	var ce *connect.Error
	if errors.As(err, &ce) {
		a.Err = &wireError{ce: ce}
		a.Meta = lowerKeys(ce.Meta())
		a.FromServer = connect.IsWireError(ce)
	}
	return a
}

// wireError is a connect error as the layers read it: a gRPC status with the same
// code, message and details. Unwrap gives the connect error back.
type wireError struct{ ce *connect.Error }

func (e *wireError) Error() string { return e.ce.Error() }
func (e *wireError) Unwrap() error { return e.ce }
func (e *wireError) GRPCStatus() *status.Status {
	st := status.New(codes.Code(e.ce.Code()), e.ce.Message())
	var details []protoadapt.MessageV1
	for _, d := range e.ce.Details() {
		if m, err := d.Value(); err == nil {
			details = append(details, protoadapt.MessageV1Of(m))
		}
	}
	if with, err := st.WithDetails(details...); err == nil && len(details) > 0 {
		st = with
	}
	return st
}

func lowerKeys(h http.Header) metadata.MD {
	if len(h) == 0 {
		return nil
	}
	md := make(metadata.MD, len(h))
	for k, vs := range h {
		md[strings.ToLower(k)] = vs
	}
	return md
}

// clientError is the error a connect client's caller gets for a: the connect error
// that came off the wire, when no layer changed it, else a connect error with the
// code of a's status, wrapping the layers' error (so that errors.Is finds
// breaker.ErrOpen, context.DeadlineExceeded...) and carrying a's metadata (the
// pushback a handler relays).
func clientError(a rpc.Answer) error {
	var we *wireError
	if errors.As(a.Err, &we) && a.Err == error(we) {
		return we.ce
	}
	return toConnect(a.Err, a.Meta)
}

// layerError is the error a connect handler (or a refused stream) answers for err:
// a layer's refusal with its status (code, message, RetryInfo) and its metadata
// (pushback), or the handler's own error unchanged.
func layerError(err error) error {
	var r *rpc.Refusal
	if !errors.As(err, &r) {
		return err
	}
	return toConnect(r.Err, r.Meta)
}

// toConnect is err as a *connect.Error carrying the metadata md, with err itself
// underneath: the code and details of err's gRPC status, or of the connect error it
// wraps (a handler relaying a downstream's answer). Another error is returned as it
// is.
func toConnect(err error, md metadata.MD) error {
	var ce *connect.Error
	var out *connect.Error
	if st, ok := status.FromError(err); ok {
		out = connect.NewError(connect.Code(st.Code()), err)
		for _, d := range st.Proto().GetDetails() {
			if detail, derr := connect.NewErrorDetail(d); derr == nil {
				out.AddDetail(detail)
			}
		}
	} else if errors.As(err, &ce) {
		out = connect.NewError(ce.Code(), err)
		for _, d := range ce.Details() {
			out.AddDetail(d)
		}
		for k, vs := range ce.Meta() {
			out.Meta()[k] = vs
		}
	} else {
		return err
	}
	for k, vs := range md {
		out.Meta().Del(k)
		for _, v := range vs {
			out.Meta().Add(k, v)
		}
	}
	return out
}

// endingStream calls end with the stream's outcome when its response side is
// closed or ends.
type endingStream struct {
	connect.StreamingClientConn
	end  func(error)
	done bool
}

func (s *endingStream) Receive(m any) error {
	err := s.StreamingClientConn.Receive(m)
	if err != nil && !s.done {
		s.done = true
		s.end(err)
	}
	return err
}

func (s *endingStream) CloseResponse() error {
	err := s.StreamingClientConn.CloseResponse()
	if !s.done {
		s.done = true
		s.end(nil)
	}
	return err
}

// admittingStream asks admit, before the stream's first message goes out (connect-go
// sends nothing before it), whether the stream may open; a refused stream sends
// nothing, and answers the refusal.
type admittingStream struct {
	connect.StreamingClientConn
	ctx     context.Context
	admit   rpc.StreamAdmit
	asked   bool
	refusal error
	end     func(error)
}

func (s *admittingStream) open() error {
	if !s.asked {
		s.asked = true
		spec := s.Spec()
		end, err := s.admit(s.ctx, &rpc.Call{Procedure: spec.Procedure, Target: s.Peer().Addr})
		if err != nil {
			s.refusal = layerError(err)
		}
		s.end = end
	}
	return s.refusal
}

func (s *admittingStream) Send(m any) error {
	if err := s.open(); err != nil {
		return err
	}
	return s.StreamingClientConn.Send(m)
}

func (s *admittingStream) CloseRequest() error {
	if err := s.open(); err != nil {
		return nil
	}
	return s.StreamingClientConn.CloseRequest()
}

func (s *admittingStream) Receive(m any) error {
	if err := s.open(); err != nil {
		return err
	}
	err := s.StreamingClientConn.Receive(m)
	if err != nil {
		s.finish(err)
	}
	return err
}

func (s *admittingStream) CloseResponse() error {
	if s.open() != nil {
		return nil
	}
	err := s.StreamingClientConn.CloseResponse()
	s.finish(nil)
	return err
}

// finish reports the stream's outcome, once: io.EOF is a stream that ended well.
func (s *admittingStream) finish(err error) {
	if s.end == nil {
		return
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	if err != nil {
		err = answer(nil, err).Err
	}
	s.end(err)
	s.end = nil
}

// refusedStream is a stream a layer refused before it was opened: it sends nothing
// and answers err.
type refusedStream struct {
	connect.StreamingClientConn
	err error
}

func (s *refusedStream) Send(any) error    { return s.err }
func (s *refusedStream) Receive(any) error { return s.err }
