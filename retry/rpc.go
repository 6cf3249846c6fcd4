package retry

import (
	"context"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/internal/attempts"
	"github.com/deadlinekit/deadlinekit/internal/idempotency"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/internal/record"
	"github.com/deadlinekit/deadlinekit/internal/rpc"
)

// The layer for frameworks this package does not import (package connectkit): the
// client side retries as [UnaryClientInterceptor] does, on the same classification of
// the same codes, reading the pushback from the answer's metadata; the server side is
// [UnaryServerInterceptor]'s one-layer rule, from the request's headers.
func init() {
	rpc.Register("retry", func(opts []Option) rpc.Layer {
		c := newConfig(opts)
		return rpc.Layer{Client: func(ctx context.Context, call *rpc.Call, send rpc.Send) rpc.Answer {
			ctx, span := record.StartCall(ctx, record.GRPC, call.Procedure)
			l := loop[rpc.Answer, rpcCall]{c: c, proto: record.GRPC, method: call.Procedure}
			l.begin(ctx)
			ctx = c.withCallKey(ctx, call.Procedure, call.Idempotent)
			if key := metadata.ValueFromOutgoingContext(ctx, idempotency.Key); idempotency.Keyed(key) {
				record.IdempotencyKey(ctx, key[0])
			}
			var last rpc.Answer // the last attempt's, whose metadata a stop keeps
			l.p = rpcCall{c: c, call: call, next: send, last: &last}
			a, err := l.run(ctx)
			if err != nil {
				if a.Meta == nil {
					// Stopped: the caller's error carries the last answer's headers
					// and trailers, as grpc.Header and grpc.Trailer do for a gRPC call.
					a.Meta = last.Meta
				}
				a.Err, a.Resp = err, nil
				if v := a.Meta.Get(pushback.Key); len(v) > 0 {
					a.Err = &pushback.Error{Err: err, Value: v[0]}
				}
			}
			span.End(a.Err)
			return a
		}, Server: rpcServer, Resends: true}
	})
}

// rpcServer is the one-layer rule of [UnaryServerInterceptor], for unary calls.
func rpcServer(ctx context.Context, in *rpc.Inbound, handle rpc.Handle) (any, error) {
	if in.Stream {
		return handle(ctx)
	}
	mark := &inbound{retry: attempts.Parse(in.Header.Get(attempts.Header)) > 0}
	resp, err := handle(context.WithValue(ctx, inboundKey{}, mark))
	if err != nil && mark.gaveUp.Load() {
		return resp, &rpc.Refusal{Err: err, Meta: metadata.Pairs(pushback.Key, pushback.DoNotRetry)}
	}
	return resp, err
}

// rpcCall is the neutral adapter of one call: each attempt is a send.
type rpcCall struct {
	c    *config
	call *rpc.Call
	next rpc.Send
	last *rpc.Answer // the last attempt's answer
}

func (r rpcCall) send(actx context.Context, n int, _ bool) (rpc.Answer, error, bool) {
	actx = attempts.Outgoing(actx, n-1)
	a := r.next(actx)
	*r.last = a
	return a, a.Err, true
}

func (rpcCall) replied(a rpc.Answer) bool { return len(a.Meta.Get(pushback.Key)) > 0 }

func (r rpcCall) judge(ctx context.Context, a rpc.Answer, err error, timedOut bool) outcome {
	if err == nil {
		return outcome{d: decision{verdict: Answered}}
	}
	st, _ := status.FromError(err)
	idem := r.call.Idempotent || r.c.grpcIdempotent(ctx, r.call.Procedure)
	keyed := keyedCall(ctx)
	d := classifyGRPC(grpcAttempt{err: err, status: st, trailer: a.Meta, timedOut: timedOut, idem: idem, keyed: keyed, callEnded: ctx.Err() != nil, unsent: a.Unsent})
	return outcome{d: d, err: err, idempotent: idem}
}

func (rpcCall) discard(_ rpc.Answer, cancel context.CancelFunc) {
	if cancel != nil {
		cancel()
	}
}

func (rpcCall) deliver(a rpc.Answer, err error, cancel context.CancelFunc) (rpc.Answer, error) {
	if cancel != nil {
		cancel()
	}
	return a, err
}

func (rpcCall) stopped(ctx context.Context, err error) error { return grpcStop(ctx, err) }

// answered is false: a failure is its status, which a stop error keeps.
func (rpcCall) answered(rpc.Answer) bool { return false }

func (r rpcCall) keep(a rpc.Answer, cancel context.CancelFunc) (rpc.Answer, bool) {
	r.discard(a, cancel)
	return a, false
}

// dedup reads what a deduping server said of a keyed call's attempt: its replay
// marker (idempotent-replayed: true in the answer's metadata), a conflict.
func (rpcCall) dedup(ctx context.Context, a rpc.Answer, d decision) (record.DedupAnswer, bool) {
	if !keyedCall(ctx) {
		return record.DedupAnswer{}, false
	}
	return dedupAnswer(a.Meta.Get(idempotency.ReplayedKey), d), true
}

// writes is 0: grpc-go and connect resend nothing by themselves that reached a server.
func (rpcCall) writes(rpc.Answer) int { return 0 }
