package breaker

import (
	"context"
	"io"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

// UnaryClientInterceptor returns a gRPC unary client interceptor that breaks the
// circuit of each ClientConn target, with a [Breaker] of its own made from opts.
// Use [New] and [Breaker.UnaryClientInterceptor] to share the circuits with other
// adapters (the stream interceptor).
func UnaryClientInterceptor(opts ...Option) grpc.UnaryClientInterceptor {
	return New(opts...).UnaryClientInterceptor()
}

// StreamClientInterceptor returns a gRPC stream client interceptor that breaks the
// circuit of each ClientConn target, with a [Breaker] of its own made from opts.
func StreamClientInterceptor(opts ...Option) grpc.StreamClientInterceptor {
	return New(opts...).StreamClientInterceptor()
}

// UnaryClientInterceptor returns a unary client interceptor with b's circuits. A
// refused call is not sent: it fails with status UNAVAILABLE, an error matching
// [ErrOpen] that carries the time until the next probe as its
// grpc-retry-pushback-ms (read with the internal pushback.Of; the caller's
// grpc.Trailer options get it too), so that a retry layer above can tell when a
// retry could pass.
func (b *Breaker) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return b.unary
}

// unaryCall is what a unary call allocates, once: the trailer (for a guard's "do
// not retry"), the call option that captures it, and room for the call's options.
// It is not reused: the layer beneath may still read the options when the call
// returns (a hedge that its timer is starting, which the call's end cancels, copies
// them), so nothing handed to it may be overwritten by the next call.
type unaryCall struct {
	trailer metadata.MD
	topt    grpc.TrailerCallOption
	opts    [4]grpc.CallOption
	note    note // for the endpoints' circuits (BalancerName)
}

func (b *Breaker) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c := b.grpcCircuit(ctx, cc, method)
	if c == nil {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	tk := ticket{unthrottled: c.endpoints.Load()}
	if err := b.admit(ctx, c, &tk); err != nil {
		return refusal(err, opts)
	}
	u := new(unaryCall)
	u.topt.TrailerAddr = &u.trailer
	var n *note
	if endpointsInUse.Load() {
		n = &u.note
		n.b, n.target = b, cc.Target()
		ctx = context.WithValue(ctx, noteKey{}, n)
	}
	err := invoker(ctx, method, req, reply, cc, append(append(u.opts[:0], opts...), &u.topt)...)
	if n != nil {
		b.byEndpoints(c, n.judged.Load())
	}
	if n != nil && n.judged.Load() {
		b.judged(ctx, &tk)
		return err
	}
	b.done(ctx, &tk, &Result{Method: method, GRPC: true, Err: err, Trailer: u.trailer})
	return err
}

// byEndpoints notes whether the last call through the target circuit c was judged
// by its endpoints' circuits: while it was, their throttles decide, not c's.
func (b *Breaker) byEndpoints(c *circuit, judged bool) {
	if c.thr != nil && c.endpoints.Load() != judged {
		c.endpoints.Store(judged)
	}
}

// judged releases the target circuit's ticket of a call that its endpoint's
// circuit judged (BalancerName): it counts nothing, except that a target circuit
// left half-open (from when the target had one endpoint) closes with its probes.
func (b *Breaker) judged(ctx context.Context, t *ticket) {
	if t.probe {
		b.settle(ctx, t, Success, false, false, int64(time.Since(t.c.epoch)))
	}
}

// refusal is the gRPC form of an admission's refusal: its pushback on the error and
// in the caller's trailer options.
func refusal(err error, opts []grpc.CallOption) error {
	lr, ok := err.(localRefusal)
	if !ok {
		return err
	}
	var md metadata.MD
	for _, o := range opts {
		var addr *metadata.MD
		switch o := o.(type) {
		case grpc.TrailerCallOption:
			addr = o.TrailerAddr
		case *grpc.TrailerCallOption:
			addr = o.TrailerAddr
		}
		if addr != nil {
			if md == nil {
				md = metadata.Pairs(pushback.Key, lr.pushbackValue())
			}
			*addr = md
		}
	}
	return lr.carried()
}

// StreamClientInterceptor returns a stream client interceptor with b's circuits. A
// refused stream is not opened (the error is the unary interceptor's). A stream's
// outcome is known when it ends: RecvMsg's final error (io.EOF: success), or its
// caller's context ending; a stream that answered (a message, or its header) and
// then ended by its caller's cancellation or deadline counts as a success (reported
// to the classifier with a nil Err); a server-streaming or bidi stream ended by its
// caller's deadline before any answer is neutral ([Result.ServerStreams]). A
// stream admitted as a half-open probe is
// judged at its first answer instead, a success, and its end is not counted: a
// healthy watch closes the circuit as soon as it answers, however long it then
// runs. Streams do not count as slow calls, nor feed the typical latency.
func (b *Breaker) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return b.stream
}

func (b *Breaker) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	c := b.grpcCircuit(ctx, cc, method)
	if c == nil {
		return streamer(ctx, desc, cc, method, opts...)
	}
	s := &clientStream{b: b, ctx: ctx, serverStreams: desc.ServerStreams}
	s.st.method, s.st.serverStreams, s.st.t.stream = method, desc.ServerStreams, true
	s.st.t.unthrottled = c.endpoints.Load()
	if err := b.admit(ctx, c, &s.st.t); err != nil {
		return nil, refusal(err, opts)
	}
	if endpointsInUse.Load() {
		s.note = &note{b: b, target: cc.Target(), stream: true, serverStreams: desc.ServerStreams}
		ctx = context.WithValue(ctx, noteKey{}, s.note)
	}
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if s.note != nil {
		b.byEndpoints(c, s.note.judged.Load())
	}
	if err != nil {
		s.finish(err, nil)
		return nil, err
	}
	s.ClientStream = cs
	// When ctx has ended already, or ends now, the function runs at once on a
	// goroutine of its own, while stop is being stored: finish reads it
	// atomically, and has nothing to stop from that goroutine anyway.
	stop := context.AfterFunc(ctx, func() {
		// The user's classifier and observers run here, on a goroutine of the
		// breaker's: a panic of theirs must not kill the process.
		defer func() { _ = recover() }()
		s.finish(ctx.Err(), nil)
	})
	s.stop.Store(&stop)
	return s, nil
}

type clientStream struct {
	grpc.ClientStream
	b             *Breaker
	ctx           context.Context
	serverStreams bool
	st            streamTicket
	stop          atomic.Pointer[func() bool] // context.AfterFunc's
	finished      atomic.Bool
	note          *note // for the endpoints' circuits (BalancerName); nil when unused
}

// answered takes an answer of the stream, for its target's circuit and the
// endpoint's probe.
func (s *clientStream) answered() {
	s.b.streamAnswered(s.ctx, &s.st)
	if s.note != nil {
		if p := s.note.probe.Load(); p != nil {
			s.b.streamAnswered(s.ctx, p)
		}
	}
}

// finish reports the stream's outcome, once.
func (s *clientStream) finish(err error, trailer metadata.MD) {
	if !s.finished.CompareAndSwap(false, true) {
		return
	}
	if stop := s.stop.Load(); stop != nil {
		(*stop)()
	}
	if s.note != nil && s.note.judged.Load() {
		if s.st.reported.CompareAndSwap(false, true) {
			s.b.judged(s.ctx, &s.st.t)
		}
		return
	}
	s.b.streamEnded(s.ctx, &s.st, err, trailer)
}

func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	switch {
	case err == nil:
		s.answered()
		if !s.serverStreams {
			s.finish(nil, nil) // a single answer: the stream is done
		}
	case err == io.EOF:
		s.finish(nil, nil)
	default:
		s.finish(err, s.ClientStream.Trailer())
	}
	return err
}

// Header is the stream's header: its arrival is an answer (grpc-go returns no
// metadata for a stream that ended without one).
func (s *clientStream) Header() (metadata.MD, error) {
	md, err := s.ClientStream.Header()
	if err == nil && md != nil {
		s.answered()
	}
	return md, err
}

func (s *clientStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil && err != io.EOF {
		s.finish(err, nil)
	}
	return err
}
