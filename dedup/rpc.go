package dedup

import (
	"context"
	"slices"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	spb "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/idempotency"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/internal/rpc"
)

// Deduplication for frameworks this package does not import (package connectkit),
// as for grpc-go: the key is the Idempotency-Key header (the idempotency-key
// metadata of the gRPC protocol is the same header), the answer stored is what the
// first caller received: the response message, or the handler's error read as the
// framework sent it (rpc.Reply's Status), with the header and trailer metadata
// where that caller received them (what the handler set for the call through the
// framework, connect-go's CallInfo, then what it set on the response or its error
// carried), and the refusals are the gRPC statuses of [UnaryServerInterceptor]. A
// repeat gets the stored metadata back where it was, and idempotent-replayed in
// the header, for an error too. Metadata that a layer outside this one set for the
// call before it came here is not stored: that layer sets it again for a repeat.
// As there, a handler's plain context or budget error releases the key, a response
// that cannot be marshalled is answered (and stored) as Internal "marshal message:
// ...", with the metadata set for the call and on the response, and everything
// stored counts against [WithMaxResponseSize]. Streams go through untouched.
func init() {
	rpc.Register("dedup", func(store Store, opts []Option) rpc.Layer {
		c := &core{store: store, c: newConfig(opts)}
		return rpc.Layer{Server: func(ctx context.Context, in *rpc.Inbound, handle rpc.Handle) (any, error) {
			if in.Stream || in.Reply == nil {
				return handle(ctx)
			}
			vs := in.Header.Values(idempotency.Header)
			if len(vs) == 0 || deduplicated(ctx) {
				return handle(ctx)
			}
			return c.serveRPC(ctx, in, vs, handle)
		}}
	})
}

func refusal(code codes.Code, msg string, md metadata.MD) error {
	return &rpc.Refusal{Err: status.Error(code, msg), Meta: md}
}

func (c *core) serveRPC(ctx context.Context, in *rpc.Inbound, vs []string, handle rpc.Handle) (any, error) {
	key, err := ParseKey(vs)
	if err != nil {
		c.report(ctx, outMalformed, nil)
		return nil, refusal(codes.InvalidArgument, err.Error(), nil)
	}
	t := &ticket{inbound: key}
	if err := c.fingerprintGRPC(ctx, in.Procedure, in.Req, t); err != nil {
		c.report(ctx, outMalformed, nil)
		return nil, refusal(codes.InvalidArgument, "dedup: the request cannot be fingerprinted: "+err.Error(), nil)
	}
	switch c.begin(ctx, t) {
	case vRun:
		return c.runRPC(ctx, in, t, handle)
	case vReplay:
		return c.replayRPC(ctx, in, t)
	case vConflict:
		c.report(ctx, outConflict, t)
		return nil, refusal(codes.Aborted, "dedup: the first call with this Idempotency-Key is still being processed; come back in "+deadline.Format(t.comeBack),
			metadata.Pairs(pushback.Key, pushbackMs(t.comeBack)))
	case vMismatch:
		c.report(ctx, outMismatch, t)
		return nil, &rpc.Refusal{Err: keyReused("dedup: this Idempotency-Key was used for a different call (procedure or message differ)")}
	case vUnavailable:
		c.report(ctx, outUnavailable, t)
		if c.c.runWithoutStore {
			return c.workRPC(ctx, nil, handle)(ctx)
		}
		// The store's failure, not this server's: the caller's breaker stays neutral.
		comeBack := c.storeDown(ctx, t.err)
		return nil, refusal(codes.Unavailable, storeDownMessage(t.err, comeBack),
			metadata.Pairs(pushback.Key, pushbackMs(comeBack), pushback.RelayedKey, pushback.Yes))
	default:
		c.report(ctx, outCanceled, t)
		return nil, status.FromContextError(t.err).Err()
	}
}

func (c *core) runRPC(ctx context.Context, in *rpc.Inbound, t *ticket, handle rpc.Handle) (resp any, err error) {
	completed := false
	defer func() {
		if !completed {
			c.release(ctx, t)
			c.report(ctx, outReleased, t)
		}
	}()
	// What the layers outside set for the call before it came here, they set
	// again for a repeat: the answer keeps what was set beneath.
	outerH, outerT := in.Reply.CallMeta(ctx)
	rc := &runContext{}
	resp, err = c.workRPC(ctx, rc, handle)(c.runCtx(ctx, t, rc))
	completed = true
	callH, callT := in.Reply.CallMeta(ctx)
	callH, callT = since(outerH, callH), since(outerT, callT)
	a := &grpcAnswer{}
	code, storable := codes.OK, true
	if err != nil {
		st, header, trailer := in.Reply.Status(ctx, err)
		code = st.Code()
		a.setStatus(st)
		if in.Reply.ErrorMetaInTrailer(ctx) {
			trailer = sentMeta(ctx, trailer)
		} else {
			header = sentMeta(ctx, header)
		}
		a.header, a.trailer = metadata.Join(callH, header), metadata.Join(callT, trailer)
	} else if msg, header, trailer, ok := in.Reply.Split(in.Procedure, resp); ok {
		a.header, a.trailer = metadata.Join(callH, header), metadata.Join(callT, trailer)
		if m, isProto := msg.(proto.Message); !isProto || m == nil {
			storable = false
		} else if st := a.setMessage(m, "marshal message: "); st != nil {
			// connect-go would fail to send it, and answer this status with the
			// response's metadata where the response had it: answer it here, so
			// that the first caller and every repeat get the same.
			in.Reply.AddCallMeta(ctx, header, trailer)
			code, resp, err = st.Code(), nil, &rpc.Refusal{Err: storedStatus{st}}
		}
	} else {
		storable = false
	}
	if rc.forgot.Load() || unfinished(code, err) || comeBackGRPC(ctx, status.New(code, ""), metadata.Join(a.header, a.trailer)) {
		c.release(ctx, t)
		c.report(ctx, outReleased, t)
		return resp, err
	}
	c.keepGRPC(ctx, t, a, storable, code)
	return resp, err
}

// since returns what after, the metadata of a call, holds beyond before, what it
// held earlier: for each key, the values added after before's, or all of them when
// before's were replaced.
func since(before, after metadata.MD) metadata.MD {
	if len(before) == 0 {
		return after
	}
	out := make(metadata.MD, len(after))
	for k, vs := range after {
		if b := before[k]; len(b) <= len(vs) && slices.Equal(b, vs[:len(b)]) {
			vs = vs[len(b):]
		}
		if len(vs) > 0 {
			out[k] = vs
		}
	}
	return out
}

// storedStatus is a stored status as a handler's error: its text is the status's
// message alone, as the first caller read it (connect-go's error message is its
// cause's text, which for a status error would repeat the code).
type storedStatus struct{ st *status.Status }

func (e storedStatus) Error() string              { return e.st.Message() }
func (e storedStatus) GRPCStatus() *status.Status { return e.st }

func (c *core) replayRPC(ctx context.Context, in *rpc.Inbound, t *ticket) (any, error) {
	out := outReplayed
	if t.waited > 0 {
		out = outWaited
	}
	replayed := metadata.Pairs(ReplayedKey, "true")
	v, err := decodeAnswer(t.answer)
	switch a := v.(type) {
	case *grpcAnswer:
		if len(a.status) > 0 {
			var sp spb.Status
			if err := proto.Unmarshal(a.status, &sp); err != nil {
				break
			}
			c.report(ctx, out, t)
			// The stored metadata goes where the first caller received it,
			// through the call as a handler sets it, not on the error (whose
			// metadata the protocol places).
			in.Reply.AddCallMeta(ctx, metadata.Join(a.header, replayed), a.trailer)
			return nil, &rpc.Refusal{Err: storedStatus{status.FromProto(&sp)}}
		}
		msg, err := a.response()
		if err != nil {
			break
		}
		resp, ok := in.Reply.Make(in.Procedure, msg, metadata.Join(a.header, replayed), a.trailer)
		if !ok {
			// This replica has not answered the procedure yet and cannot make its
			// response type: the caller comes back, to this replica or another.
			t.err = errNoResponseType
			c.report(ctx, outUnavailable, t)
			return nil, refusal(codes.Unavailable, "dedup: the stored answer cannot be rebuilt on this server yet",
				metadata.Pairs(pushback.Key, pushbackMs(c.c.storeRetryAfter)))
		}
		c.report(ctx, out, t)
		return resp, nil
	case *notKept:
		// Not the stored answer: no Idempotent-Replayed marker.
		c.report(ctx, outNotKept, t)
		return nil, refusal(codes.AlreadyExists, "dedup: the first call with this Idempotency-Key completed with code "+
			codes.Code(a.status).String()+", but its answer ("+strconv.Itoa(a.size)+" bytes) was above the size limit and was not kept", nil)
	case *httpAnswer:
		c.report(ctx, outMismatch, t)
		return nil, &rpc.Refusal{Err: keyReused("dedup: this Idempotency-Key was used for a different request (an HTTP one)")}
	}
	if err == nil {
		err = errCorrupt
	}
	t.err = err
	c.report(ctx, outUnavailable, t)
	return nil, refusal(codes.Internal, "dedup: the stored answer for this Idempotency-Key cannot be read: "+err.Error(), nil)
}
