package connectkit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/deadlinekit/deadlinekit/internal/attempts"
	"github.com/deadlinekit/deadlinekit/internal/idempotency"
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
	// stamps: the outgoing metadata keys the client side sets in each send's
	// context, which the request sent must carry (rpc.Layer.Stamps).
	stamps []string
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
	idem := spec.IdempotencyLevel == connect.IdempotencyNoSideEffects || spec.IdempotencyLevel == connect.IdempotencyIdempotent
	// A call that may not run twice is resent only when an attempt provably never
	// left the client: its HTTP request's header was not written.
	c := &clientCall{call: rpc.Call{Procedure: spec.Procedure, Target: req.Peer().Addr, Idempotent: idem},
		req: req, next: next, stamps: i.stamps, traced: !idem}
	var send rpc.Send
	if i.resends {
		// Every attempt sends a copy of its own; c.req, a copy nobody sends, is
		// what they are copied from. A layer that sends once passes on the request
		// it was given: a copy already, when a layer above resends.
		c.req = shallowCopy(req)
		send = c.resend
		c.call.Copy = c.copy
	} else {
		send = c.send
	}
	a := i.client(withHeaderKey(ctx, req.Header()), &c.call, send)
	if a.Err != nil {
		return nil, clientError(a)
	}
	resp, _ := a.Resp.(connect.AnyResponse)
	return resp, nil
}

// clientCall is one unary call through a layer's client side: the sends it gives
// the layer.
type clientCall struct {
	call rpc.Call
	// req is the caller's request; for a layer that resends, a shallow copy of it
	// that nobody sends (sharing the caller's header and message).
	req    connect.AnyRequest
	next   connect.UnaryFunc
	stamps []string // the layer's rpc.Layer.Stamps
	traced bool     // each send says whether its request never left the client
}

// send is the send of a layer that sends once: the request it was given, stamped.
func (c *clientCall) send(ctx context.Context) rpc.Answer {
	return c.sendRequest(ctx, stamp(ctx, c.req, c.stamps))
}

// resend is the send of a layer that resends: each attempt a copy of its own,
// made as it is sent, which reads the caller's header.
func (c *clientCall) resend(ctx context.Context) rpc.Answer {
	return c.sendRequest(ctx, attempt(ctx, c.req))
}

// copy is the call's [rpc.Call.Copy]: the request is copied now, its header and
// message included ([detached]), and the send it returns writes into that copy
// what the layers added, as [attempt] does, and sends it.
func (c *clientCall) copy() rpc.Send {
	own := detached(c.req)
	return func(ctx context.Context) rpc.Answer { return c.sendRequest(ctx, stamped(ctx, own)) }
}

func (c *clientCall) sendRequest(ctx context.Context, req connect.AnyRequest) rpc.Answer {
	if c.traced {
		return sendTraced(ctx, req, c.next)
	}
	resp, err := c.next(ctx, req)
	return answer(resp, err)
}

// withHeaderKey returns ctx with the idempotency key the caller set in the request's
// header h in its outgoing metadata, when that has none: the layers read a call's
// key there (a keyed call may be retried; package retry keeps the caller's key, or
// replaces one forwarded from the request a handler serves), and each attempt's
// header is written from it ([attempt]).
func withHeaderKey(ctx context.Context, h http.Header) context.Context {
	vs := h.Values(idempotency.Header)
	if len(vs) == 0 || len(metadata.ValueFromOutgoingContext(ctx, idempotency.Key)) > 0 {
		return ctx
	}
	kv := make([]string, 0, 2*len(vs))
	for _, v := range vs {
		kv = append(kv, idempotency.Key, v)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
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
				return newRefusedStream(next(ctx, spec), clientError(rpc.Answer{Err: err}))
			}
			conn := next(sctx, spec)
			stampHeader(sctx, conn.RequestHeader(), i.stamps)
			return &endingStream{StreamingClientConn: conn, end: end}
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
// idempotency key) and the attempt span's trace context. connect-go writes each
// send's timeout header into the header it sends, and each send's HTTP method into
// the request, so attempts in flight at once (hedges) must not share them; the
// message is shared, and only read. It reads the caller's header as it is sent: a
// hedge's copy, which may still be sent once the call has returned, is taken
// earlier instead ([clientCall.copy]).
//
// The outgoing metadata may hold more than the layers wrote: a handler that forwards
// its incoming metadata puts the caller's there. As grpc-go does, the protocol's own
// headers are not sent from it (connect-go writes them: content type, timeouts,
// encodings, pseudo-headers), and grpc-previous-rpc-attempts is sent once, with
// the value the nearest layer appended last.
func attempt(ctx context.Context, req connect.AnyRequest) connect.AnyRequest {
	return stamped(ctx, &attemptRequest{AnyRequest: shallowCopy(req), header: req.Header().Clone()})
}

// stamped writes into r's header, its own, what [attempt] adds to a copy's, and
// returns r.
func stamped(ctx context.Context, r *attemptRequest) *attemptRequest {
	h := r.header
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		for k, vs := range md {
			switch {
			case strings.HasSuffix(k, "-bin") || reservedHeader(k) || len(vs) == 0:
			case k == attempts.Key:
				h[attempts.Header] = vs[len(vs)-1:]
			default:
				h[http.CanonicalHeaderKey(k)] = vs
			}
		}
	}
	// The attempt's span is the downstream's parent, not the call's that otelconnect
	// wrote into the caller's header.
	record.InjectHTTP(ctx, h)
	return r
}

// detached returns a copy of req that shares nothing the caller may change: a
// header of its own, and a copy of its message when that is a proto.Message
// (another is shared, and only read).
func detached(req connect.AnyRequest) *attemptRequest {
	r := &attemptRequest{AnyRequest: shallowCopy(req), header: req.Header().Clone()}
	if r.header == nil {
		r.header = make(http.Header)
	}
	if m, ok := req.Any().(proto.Message); ok {
		r.msg, r.ownMsg = proto.Clone(m), true
	}
	return r
}

// stamp returns req, or a copy of it with a header of its own when its header
// does not carry exactly the values the outgoing metadata of ctx has for keys (the
// keys a layer stamps: the level). The caller's request is never changed.
func stamp(ctx context.Context, req connect.AnyRequest, keys []string) connect.AnyRequest {
	for _, k := range keys {
		if !slices.Equal(req.Header().Values(http.CanonicalHeaderKey(k)), metadata.ValueFromOutgoingContext(ctx, k)) {
			h := req.Header().Clone()
			stampHeader(ctx, h, keys)
			return &attemptRequest{AnyRequest: shallowCopy(req), header: h}
		}
	}
	return req
}

// stampHeader makes h carry the values the outgoing metadata of ctx has for keys,
// and none of a key it has none for.
func stampHeader(ctx context.Context, h http.Header, keys []string) {
	for _, k := range keys {
		name := http.CanonicalHeaderKey(k)
		if vs := metadata.ValueFromOutgoingContext(ctx, k); len(vs) > 0 {
			h[name] = slices.Clone(vs)
		} else {
			delete(h, name)
		}
	}
}

// reservedHeader reports whether the metadata key k (lower case) names a header of
// the protocols connect-go speaks, or of HTTP itself, which connect-go and net/http
// write: gRPC's reserved headers (as grpc-go skips them in outgoing metadata), the
// Connect protocol's, and HTTP's framing.
func reservedHeader(k string) bool {
	if k == "" || k[0] == ':' || strings.HasPrefix(k, "connect-") {
		return true
	}
	switch k {
	case "content-type", "content-length", "content-encoding", "accept-encoding",
		"user-agent", "te", "host", "connection", "transfer-encoding", "upgrade",
		"grpc-timeout", "grpc-encoding", "grpc-accept-encoding", "grpc-message-type",
		"grpc-message", "grpc-status":
		return true
	}
	return false
}

// attemptRequest is one attempt's copy of a unary request.
type attemptRequest struct {
	connect.AnyRequest
	header http.Header
	// msg is the copy's own message when ownMsg ([detached]); else the message is
	// the request's.
	msg    any
	ownMsg bool
}

func (r *attemptRequest) Header() http.Header { return r.header }

func (r *attemptRequest) Any() any {
	if r.ownMsg {
		return r.msg
	}
	return r.AnyRequest.Any()
}

// shallowCopy returns a copy of the *connect.Request[T] behind req, sharing its
// message, so that what connect-go writes into one attempt's request (its HTTP
// method) does not race with another's.
func shallowCopy(req connect.AnyRequest) connect.AnyRequest {
	if a, ok := req.(*attemptRequest); ok {
		return &attemptRequest{AnyRequest: shallowCopy(a.AnyRequest), header: a.header.Clone(), msg: a.msg, ownMsg: a.ownMsg}
	}
	v := reflect.ValueOf(req)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return req
	}
	c := reflect.New(v.Elem().Type())
	c.Elem().Set(v.Elem())
	return c.Interface().(connect.AnyRequest)
}

// sendTraced sends req through next with an HTTP trace that sees its header
// written, and says in the answer whether the request never left the client.
func sendTraced(ctx context.Context, req connect.AnyRequest, next connect.UnaryFunc) rpc.Answer {
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) }})
	resp, err := next(ctx, req)
	a := answer(resp, err)
	a.Unsent = err != nil && !wrote.Load()
	return a
}

// answer is what an attempt came back with, in the layers' terms: a connect error's
// code as a gRPC status (its message and details with it), and its metadata
// (headers and trailers) as lower-case keys.
func answer(resp connect.AnyResponse, err error) rpc.Answer {
	if err == nil {
		a := rpc.Answer{Resp: resp}
		if v := replayed(resp); v != "" { // dedup's replay marker, for the caller's spans
			a.Meta = metadata.Pairs(idempotency.ReplayedKey, v)
		}
		return a
	}
	a := rpc.Answer{Err: err}
	var ce *connect.Error
	if errors.As(err, &ce) {
		a.Err = &wireError{ce: ce}
		a.Meta = lowerKeys(ce.Meta())
	}
	return a
}

// wireError is a connect error as the layers read it: a gRPC status with the same
// code, message and details. Unwrap gives the connect error back.
type wireError struct{ ce *connect.Error }

func (e *wireError) Error() string              { return e.ce.Error() }
func (e *wireError) Unwrap() error              { return e.ce }
func (e *wireError) GRPCStatus() *status.Status { return statusOf(e.ce) }

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
// (pushback), or the handler's own error unchanged. A refusal over the handler's
// own connect error (the retry layer's "do not retry" over a failure the handler
// relays with [Error]) keeps that error's metadata beneath the refusal's:
// deadlinekit-relayed still tells the caller's breaker this server is up.
func layerError(err error) error {
	var r *rpc.Refusal
	if !errors.As(err, &r) {
		return err
	}
	out := toConnect(r.Err, r.Meta)
	ce, own := r.Err.(*connect.Error)
	var oe *connect.Error
	if own && !connect.IsWireError(ce) && errors.As(out, &oe) && oe != ce {
		for k, vs := range ce.Meta() {
			if len(oe.Meta().Values(k)) == 0 {
				oe.Meta()[k] = vs
			}
		}
	}
	return out
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

// A stream refused by a layer sends nothing, and ends what the layers beneath that
// layer started for it when it was created (propagate's call span and derived
// context): the refusing layer discards the conn beneath it, and never passes
// anything else to it. connect-go answers a refused Send by closing both sides of the
// stream, and the real connection would answer those by sending the request; no
// stream of a refusal passes them on.

// discarder is a layer's stream that started something when it was created.
type discarder interface {
	// discard ends what this layer and the layers beneath it started for the
	// stream, as for a stream that ended with err. Nothing is sent after it.
	discard(err error)
}

// discard discards conn, when it is a layer's stream: the first conn that is not
// (the real connection, a user's interceptor) is left as it is, unsent.
func discard(conn connect.StreamingClientConn, err error) {
	if d, ok := conn.(discarder); ok {
		d.discard(err)
	}
}

// endingStream calls end with the stream's outcome when its response side is
// closed or ends, or when a layer above discards it.
type endingStream struct {
	connect.StreamingClientConn
	end  func(error)
	done atomic.Bool
}

func (s *endingStream) finish(err error) {
	if s.done.CompareAndSwap(false, true) {
		s.end(err)
	}
}

func (s *endingStream) Receive(m any) error {
	err := s.StreamingClientConn.Receive(m)
	if err != nil {
		s.finish(err)
	}
	return err
}

func (s *endingStream) CloseResponse() error {
	err := s.StreamingClientConn.CloseResponse()
	s.finish(nil)
	return err
}

func (s *endingStream) discard(err error) {
	s.finish(err)
	discard(s.StreamingClientConn, err)
}

// admittingStream asks admit, before the stream's first message goes out (connect-go
// sends nothing before it), whether the stream may open; a refused stream sends
// nothing, and answers the refusal. It reports the stream's first message received
// (a half-open probe's verdict) and its outcome. connect-go lets a bidi stream's
// Send and Receive run on two goroutines at once: the stream is admitted once, by
// whichever comes first, the other waiting for the answer, and its outcome is
// reported once.
type admittingStream struct {
	connect.StreamingClientConn
	ctx   context.Context
	admit rpc.StreamAdmit
	once  sync.Once
	// refusal, set by once, is the error that refused the stream; isRefused says
	// so to those that do not go through once.
	refusal   error
	isRefused atomic.Bool

	answered func() // set by once
	mu       sync.Mutex
	end      func(error) // nil once reported, or when refused
	received atomic.Bool
}

func (s *admittingStream) open() error {
	s.once.Do(func() {
		spec := s.Spec()
		report, err := s.admit(s.ctx, &rpc.Call{Procedure: spec.Procedure, Target: s.Peer().Addr, ServerStreams: spec.StreamType&connect.StreamTypeServer != 0})
		if err != nil {
			s.refusal = layerError(err)
			s.isRefused.Store(true)
			discard(s.StreamingClientConn, s.refusal)
			return
		}
		s.answered = report.Answered
		s.mu.Lock()
		s.end = report.End
		s.mu.Unlock()
	})
	return s.refusal
}

// refused reports whether the stream was refused, without asking.
func (s *admittingStream) refused() bool { return s.isRefused.Load() }

func (s *admittingStream) Send(m any) error {
	if err := s.open(); err != nil {
		return err
	}
	err := s.StreamingClientConn.Send(m)
	if err != nil && !errors.Is(err, io.EOF) {
		// Not the server's answer (that wraps io.EOF, and Receive reads it): the
		// stream failed on this side, or a layer beneath refused it.
		s.finish(err)
	}
	return err
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
	switch {
	case err != nil:
		s.finish(err)
	case !s.received.Load() && !s.received.Swap(true):
		// The first answer: a probe's verdict.
		s.answered()
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

func (s *admittingStream) ResponseHeader() http.Header {
	if s.refused() {
		return http.Header{}
	}
	return s.StreamingClientConn.ResponseHeader()
}

func (s *admittingStream) ResponseTrailer() http.Header {
	if s.refused() {
		return http.Header{}
	}
	return s.StreamingClientConn.ResponseTrailer()
}

// discard: a layer above refused the stream, before it was sent: it is never
// asked.
func (s *admittingStream) discard(err error) {
	s.once.Do(func() { s.refusal = err; s.isRefused.Store(true) })
	s.finish(err)
	discard(s.StreamingClientConn, err)
}

// finish reports the stream's outcome, once: io.EOF is a stream that ended well.
func (s *admittingStream) finish(err error) {
	s.mu.Lock()
	end := s.end
	s.end = nil
	s.mu.Unlock()
	if end == nil {
		return
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	if err != nil {
		err = answer(nil, err).Err
	}
	end(err)
}

// refusedStream is a stream a layer refused when it was created: it sends nothing,
// answers err, and passes nothing on to the conn beneath, which it discarded.
type refusedStream struct {
	connect.StreamingClientConn
	err error
}

func newRefusedStream(conn connect.StreamingClientConn, err error) *refusedStream {
	discard(conn, err)
	return &refusedStream{StreamingClientConn: conn, err: err}
}

func (s *refusedStream) Send(any) error               { return s.err }
func (s *refusedStream) Receive(any) error            { return s.err }
func (s *refusedStream) CloseRequest() error          { return nil }
func (s *refusedStream) CloseResponse() error         { return nil }
func (s *refusedStream) ResponseHeader() http.Header  { return http.Header{} }
func (s *refusedStream) ResponseTrailer() http.Header { return http.Header{} }
func (s *refusedStream) discard(error)                {}

// replayed is the Idempotent-Replayed header of resp, "" without one.
func replayed(resp connect.AnyResponse) string {
	if resp == nil {
		return ""
	}
	return resp.Header().Get(idempotency.ReplayedHeader)
}
