package dedup

import (
	"context"
	"crypto/sha256"
	"strconv"
	"sync"

	spb "google.golang.org/genproto/googleapis/rpc/status"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/idempotency"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

// ReplayedKey is the gRPC header metadata that marks an answer as the stored answer
// of the first call with its key.
const ReplayedKey = "idempotent-replayed"

// UnaryServerInterceptor returns a gRPC server interceptor that deduplicates unary
// calls carrying idempotency-key metadata on store, as the package documentation
// says. The first call runs the handler; its response message, the header and
// trailer metadata the stream accepted from it (metadata set after the handler
// returned is refused), and its status are stored, and a repeat gets them back
// with header metadata idempotent-replayed: true. The status is the one grpc-go
// sends: a handler's plain context error is DeadlineExceeded or Canceled, and like
// a budget refusal (shortcircuit.Check) releases the key. A response that cannot be
// marshalled is answered Internal, as grpc-go would answer it, and that answer is
// stored. [WithMaxResponseSize] bounds all that is stored: message, metadata and
// status. Responses must be protobuf messages registered in
// protoregistry.GlobalTypes (generated code registers them); an answer that is not
// is treated as one too large to keep. A call without the
// metadata goes to the handler untouched. The deadline must already be on the
// context (package propagate's interceptor before this one). It panics if store is
// nil.
func UnaryServerInterceptor(store Store, opts ...Option) grpc.UnaryServerInterceptor {
	if store == nil {
		panic("dedup: UnaryServerInterceptor with a nil Store")
	}
	c := &core{store: store, c: newConfig(opts)}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		vs, ok := md[idempotency.Key]
		if !ok || deduplicated(ctx) {
			return handler(ctx, req)
		}
		return c.serveGRPC(ctx, req, vs, info.FullMethod, handler)
	}
}

func (c *core) serveGRPC(ctx context.Context, req any, vs []string, method string, handler grpc.UnaryHandler) (any, error) {
	key, err := ParseKey(vs)
	if err != nil {
		c.report(ctx, outMalformed, nil)
		return nil, status.Error(codes.InvalidArgument, "idempotency-key: "+err.Error())
	}
	t := &ticket{inbound: key}
	if err := c.fingerprintGRPC(ctx, method, req, t); err != nil {
		c.report(ctx, outMalformed, nil)
		return nil, status.Error(codes.InvalidArgument, "dedup: the request cannot be fingerprinted: "+err.Error())
	}
	switch c.begin(ctx, t) {
	case vRun:
		return c.runGRPC(ctx, req, t, handler)
	case vReplay:
		return c.replayGRPC(ctx, t)
	case vConflict:
		c.report(ctx, outConflict, t)
		_ = grpc.SetTrailer(ctx, metadata.Pairs(pushback.Key, pushbackMs(t.comeBack)))
		return nil, status.Error(codes.Aborted, "dedup: the first call with this idempotency-key is still being processed; come back in "+deadline.Format(t.comeBack))
	case vMismatch:
		c.report(ctx, outMismatch, t)
		return nil, keyReused("dedup: this idempotency-key was used for a different call (method or message differ)")
	case vUnavailable:
		c.report(ctx, outUnavailable, t)
		if c.c.runWithoutStore {
			return c.workGRPC(ctx, nil, handler)(ctx, req)
		}
		// The store's failure, not this server's: the caller's breaker stays neutral.
		comeBack := c.storeDown(ctx, t.err)
		_ = grpc.SetTrailer(ctx, metadata.Pairs(pushback.Key, pushbackMs(comeBack), pushback.RelayedKey, pushback.Yes))
		return nil, status.Error(codes.Unavailable, storeDownMessage(t.err, comeBack))
	default: // vCanceled
		c.report(ctx, outCanceled, t)
		return nil, status.FromContextError(t.err).Err()
	}
}

var marshalDeterministic = proto.MarshalOptions{Deterministic: true}

func (c *core) fingerprintGRPC(ctx context.Context, method string, req any, t *ticket) error {
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{0})
	if m, ok := req.(proto.Message); ok {
		b, err := marshalDeterministic.Marshal(m)
		if err != nil {
			return err
		}
		h.Write(b)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	c.setFingerprint(ctx, t, &sum)
	return nil
}

// captureStream passes the handler's metadata through and keeps a copy of what
// the stream accepted: metadata grpc-go refuses (SetHeader after the header was
// sent) never reaches the caller, so it is not kept either. The handler may set
// metadata from goroutines of its own; once it has returned, the stream is sealed
// (see seal) and refuses more, so that what a replay carries is what the first
// caller received.
//
// A stream that is done (the caller left) refuses metadata too, but that refusal
// is the caller's absence, not the answer's: what the handler sets then is kept, so
// that a repeat gets the handler's whole answer, as over HTTP a body written after
// the connection broke is kept. The two are told apart by what grpc-go refuses for:
// a unary handler's header is sent only by SendHeader (the answer's header goes
// after the handler returns), so a header refused before one was sent, and any
// trailer refused, was refused because the stream is done. (Not by the call's
// context: grpc-go marks a stream done before it cancels the context, and metadata
// set in between would be lost.)
type captureStream struct {
	grpc.ServerTransportStream
	mu              sync.Mutex
	header, trailer metadata.MD
	headerSent      bool // SendHeader succeeded: later header metadata is never sent
	sealed          bool
}

// errSealed is what the handler's stream answers metadata set after the handler
// returned.
var errSealed = status.Error(codes.Internal, "dedup: metadata set after the handler returned is not sent")

// keep calls set, the stream's method, under the lock, and adds md to *into when
// the stream accepted it. The lock spans the call, so that what is kept follows
// the order in which the stream accepted it.
func (s *captureStream) keep(into *metadata.MD, md metadata.MD, header bool, set func(metadata.MD) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sealed {
		return errSealed
	}
	err := set(md)
	if err != nil && header && s.headerSent {
		return err // refused for the answer's sake: the header went
	}
	*into = metadata.Join(*into, md)
	return err
}

func (s *captureStream) SetHeader(md metadata.MD) error {
	return s.keep(&s.header, md, true, s.ServerTransportStream.SetHeader)
}

func (s *captureStream) SendHeader(md metadata.MD) error {
	return s.keep(&s.header, md, true, func(md metadata.MD) error {
		err := s.ServerTransportStream.SendHeader(md)
		s.headerSent = s.headerSent || err == nil
		return err
	})
}

func (s *captureStream) SetTrailer(md metadata.MD) error {
	return s.keep(&s.trailer, md, false, s.ServerTransportStream.SetTrailer)
}

// seal ends the capture and returns what was kept. A nil s has nothing.
func (s *captureStream) seal() (header, trailer metadata.MD) {
	if s == nil {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sealed = true
	return s.header, s.trailer
}

func (c *core) runGRPC(ctx context.Context, req any, t *ticket, handler grpc.UnaryHandler) (resp any, err error) {
	rc := &runContext{}
	hctx := c.runCtx(ctx, t, rc)
	handler = c.workGRPC(ctx, rc, handler)
	var cs *captureStream
	if st := grpc.ServerTransportStreamFromContext(ctx); st != nil {
		cs = &captureStream{ServerTransportStream: st}
		hctx = grpc.NewContextWithServerTransportStream(hctx, cs)
	}
	completed := false
	defer func() {
		if !completed { // a panic goes on unchanged
			cs.seal()
			c.release(ctx, t)
			c.report(ctx, outReleased, t)
		}
	}()
	resp, err = handler(hctx, req)
	completed = true
	a := &grpcAnswer{}
	a.header, a.trailer = cs.seal()
	a.trailer = sentTrailer(ctx, err, a.trailer)
	code, storable := codes.OK, true
	st := status.New(codes.OK, "")
	if err != nil {
		st = wireStatus(err)
		code = st.Code()
		a.setStatus(st)
	} else if m, ok := resp.(proto.Message); ok && m != nil {
		if st := a.setMessage(m, "grpc: error while marshaling: "); st != nil {
			// grpc-go would fail to send it, and answer this status: answer it
			// here, so that the first caller and every repeat get the same.
			code, resp, err = st.Code(), nil, st.Err()
		}
	} else {
		storable = false
	}
	if rc.forgot.Load() || unfinished(code, err) || comeBackGRPC(ctx, st, a.trailer) {
		c.release(ctx, t)
		c.report(ctx, outReleased, t)
		return resp, err
	}
	c.keepGRPC(ctx, t, a, storable, code)
	return resp, err
}

func (c *core) replayGRPC(ctx context.Context, t *ticket) (any, error) {
	out := outReplayed
	if t.waited > 0 {
		out = outWaited
	}
	v, err := decodeAnswer(t.answer)
	switch a := v.(type) {
	case *grpcAnswer:
		resp, err := a.response()
		if err != nil {
			t.err = err
			c.report(ctx, outUnavailable, t)
			return nil, status.Error(codes.Internal, "dedup: the stored answer for this idempotency-key cannot be read: "+err.Error())
		}
		c.report(ctx, out, t)
		hdr := metadata.Join(a.header, metadata.Pairs(ReplayedKey, "true"))
		_ = grpc.SetHeader(ctx, hdr)
		if len(a.trailer) > 0 {
			_ = grpc.SetTrailer(ctx, a.trailer)
		}
		if len(a.status) > 0 {
			var sp spb.Status
			if err := proto.Unmarshal(a.status, &sp); err != nil {
				return nil, status.Error(codes.Internal, "dedup: the stored status for this idempotency-key cannot be read: "+err.Error())
			}
			return nil, status.ErrorProto(&sp)
		}
		return resp, nil
	case *notKept:
		// Not the stored answer: no idempotent-replayed marker.
		c.report(ctx, outNotKept, t)
		return nil, status.Error(codes.AlreadyExists, "dedup: the first call with this idempotency-key completed with code "+
			codes.Code(a.status).String()+", but its answer ("+strconv.Itoa(a.size)+" bytes) was above the size limit and was not kept")
	case *httpAnswer:
		c.report(ctx, outMismatch, t)
		return nil, keyReused("dedup: this idempotency-key was used for a different request (an HTTP one)")
	default:
		t.err = err
		c.report(ctx, outUnavailable, t)
		return nil, status.Error(codes.Internal, "dedup: the stored answer for this idempotency-key cannot be read: "+err.Error())
	}
}

// response rebuilds the stored response: the message (nil error) or the status.
func (a *grpcAnswer) response() (any, error) {
	if len(a.status) > 0 {
		return nil, nil
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(a.msgName))
	if err != nil {
		return nil, err
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(a.msg, m); err != nil {
		return nil, err
	}
	return m, nil
}
