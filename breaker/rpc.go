package breaker

import (
	"context"

	"google.golang.org/grpc/metadata"

	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/internal/rpc"
)

// The layer for frameworks this package does not import (package connectkit): a
// circuit per call target (the host and port of a connect client's URL, or the key
// of [WithKey]), outcomes classified as a gRPC call's, and a refusal that is
// [Breaker.UnaryClientInterceptor]'s: UNAVAILABLE with the time to the next probe as
// its grpc-retry-pushback-ms.
func init() {
	rpc.Register("breaker", func(b *Breaker) rpc.Layer {
		return rpc.Layer{Client: func(ctx context.Context, call *rpc.Call, send rpc.Send) rpc.Answer {
			c := b.rpcCircuit(ctx, call.Target, call.Procedure)
			if c == nil {
				return send(ctx)
			}
			var tk ticket
			if err := b.admit(ctx, c, &tk); err != nil {
				if lr, ok := err.(localRefusal); ok {
					return rpc.Answer{Err: lr.carried(), Meta: metadata.Pairs(pushback.Key, lr.pushbackValue())}
				}
				return rpc.Answer{Err: err}
			}
			a := send(ctx)
			b.done(ctx, &tk, &Result{Method: call.Procedure, GRPC: true, Err: a.Err, Trailer: a.Meta})
			return a
		}, StreamAdmit: b.rpcStream}
	})
}

// rpcStream admits a stream as [Breaker.StreamClientInterceptor] does, and judges it
// as that does: a probe at its first message, any other stream when it ends; neither
// slow nor a latency.
func (b *Breaker) rpcStream(ctx context.Context, call *rpc.Call) (rpc.StreamReport, error) {
	c := b.rpcCircuit(ctx, call.Target, call.Procedure)
	if c == nil {
		return rpc.StreamReport{Answered: func() {}, End: func(error) {}}, nil
	}
	st := &streamTicket{method: call.Procedure, serverStreams: call.ServerStreams}
	st.t.stream = true
	if err := b.admit(ctx, c, &st.t); err != nil {
		if lr, ok := err.(localRefusal); ok {
			return rpc.StreamReport{}, &rpc.Refusal{Err: lr.carried(), Meta: metadata.Pairs(pushback.Key, lr.pushbackValue())}
		}
		return rpc.StreamReport{}, err
	}
	return rpc.StreamReport{
		Answered: func() { b.streamAnswered(ctx, st) },
		End:      func(err error) { b.streamEnded(ctx, st, err, nil) },
	}, nil
}

// rpcCircuit is grpcCircuit for a call to target made through a framework.
func (b *Breaker) rpcCircuit(ctx context.Context, target, method string) *circuit {
	if f := b.cfg.key; f != nil {
		return b.circuit(key{kind: keyCustom, b: orDefault(f(ctx, Call{Target: target, Method: method}), target)})
	}
	return b.circuit(key{kind: keyGRPC, b: target})
}
