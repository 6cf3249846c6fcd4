package shortcircuit

import (
	"context"

	"github.com/deadlinekit/deadlinekit/internal/idempotency"
	"github.com/deadlinekit/deadlinekit/internal/rpc"
)

// The guard for frameworks this package does not import (package connectkit), as for
// grpc-go: the route key is the procedure, a refusal is the gRPC status and trailer
// of [UnaryServerInterceptor], and streams are guarded by the floor only, as by
// [StreamServerInterceptor].
func init() {
	rpc.Register("shortcircuit", func(opts []Option) rpc.Layer {
		unary := newGuard(opts)
		stream := newGuard(append(opts[:len(opts):len(opts)], withoutLimit()))
		return rpc.Layer{Server: func(ctx context.Context, in *rpc.Inbound, handle rpc.Handle) (any, error) {
			g := unary
			if in.Stream {
				g = stream
			}
			var t ticket
			if !g.admit(ctx, in.Procedure, &t) {
				md, err := refusalStatus(&t)
				return nil, &rpc.Refusal{Err: err, Meta: md}
			}
			if !in.Stream && g.tracks(&t) && len(in.Header.Values(idempotency.Header)) > 0 {
				wk, kctx := g.hold(ctx, &t)
				return g.serveRPC(kctx, &wk.t, handle)
			}
			return g.serveRPC(ctx, &t, handle)
		}}
	})
}

// serveRPC runs handle for a call the guard admitted with t, and ends t.
func (g *guard) serveRPC(ctx context.Context, t *ticket, handle rpc.Handle) (any, error) {
	if g.lim != nil {
		defer g.releaseOnPanic(t)
	}
	resp, err := handle(ctx)
	g.done(ctx, t, err == nil)
	if err != nil {
		if refused, mapped := budgetStatus(err); refused {
			return resp, &rpc.Refusal{Err: mapped, Meta: doNotRetry}
		}
	}
	return resp, err
}
