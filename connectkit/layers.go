package connectkit

import (
	"context"

	"connectrpc.com/connect"

	"github.com/deadlinekit/deadlinekit/internal/rpc"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// Propagate returns the deadline layer (package propagate). On a client, it derives
// each call's and each stream's context from the caller's by the options (reserve,
// per-hop cap, floor, default), and connect-go writes the result on the wire; a call
// with less than the floor left fails with CodeDeadlineExceeded, unsent. On a
// handler, it applies the server's rules to the deadline connect-go read (the clamp,
// the default budget, Envoy's header when trusted: [propagate.WithTrustGRPC] decides
// per call, from its context) and refuses a request that arrived with no time left
// with CodeDeadlineExceeded and grpc-retry-pushback-ms: -1.
func Propagate(opts ...propagate.Option) connect.Interceptor {
	stream := rpc.Lookup[func([]propagate.Option) func(context.Context, string) (context.Context, func(error), error)]("propagate.stream")(opts)
	return &interceptor{
		client: rpc.Lookup[func([]propagate.Option) rpc.Client]("propagate.client")(opts),
		server: rpc.Lookup[func([]propagate.Option) rpc.Server]("propagate.server")(opts),
		stream: func(ctx context.Context, spec connect.Spec) (context.Context, func(error), error) {
			return stream(ctx, spec.Procedure)
		},
	}
}

// ShortCircuit returns the server guard (package shortcircuit) for connect handlers:
// the floor, and admission under a concurrency limit, as
// [shortcircuit.UnaryServerInterceptor] applies them, keyed by procedure; streams
// are held to the floor only, as [shortcircuit.StreamServerInterceptor] holds them. A
// refusal is CodeDeadlineExceeded with grpc-retry-pushback-ms: -1 for lack of time,
// or CodeResourceExhausted with RetryInfo and grpc-retry-pushback-ms for a full
// queue. On a client it does nothing.
func ShortCircuit(opts ...shortcircuit.Option) connect.Interceptor {
	return &interceptor{server: rpc.Lookup[func([]shortcircuit.Option) rpc.Server]("shortcircuit.server")(opts)}
}
