package deadlinekit

import (
	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/rpc"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// The stack for frameworks the library does not import (package connectkit): the
// layers' adapters in the order of [DialOptions] and [ServerOptions], configured by
// the stack's options as they configure those.
func init() {
	rpc.Register("deadlinekit.client", func(opts []Option) []rpc.Layer {
		c := newConfig(opts)
		var layers []rpc.Layer
		if c.has(Retry) {
			layers = append(layers, rpc.Lookup[func([]retry.Option) rpc.Layer]("retry")(c.retryOptions()))
		}
		if c.has(Breaker) {
			layers = append(layers, rpc.Lookup[func(*breaker.Breaker) rpc.Layer]("breaker")(c.newBreaker()))
		}
		if c.has(Hedge) {
			layers = append(layers, rpc.Lookup[func(*hedge.Hedger, []string) rpc.Layer]("hedge")(c.newHedger(), c.sharedIdempotent()))
		}
		if c.has(Propagate) {
			layers = append(layers, rpc.Lookup[func([]propagate.Option) rpc.Layer]("propagate")(c.propagateOptions()))
		}
		return layers
	})
	rpc.Register("deadlinekit.server", func(opts []Option) []rpc.Layer {
		c := newConfig(opts)
		var layers []rpc.Layer
		if c.edge {
			layers = append(layers, rpc.Layer{Server: edgeRPCOuter}, rpc.Layer{Server: edgeDropLevelRPC})
		}
		if c.has(Propagate) {
			layers = append(layers, rpc.Lookup[func([]propagate.Option) rpc.Layer]("propagate")(c.propagateOptions()))
		}
		if c.level != nil {
			layers = append(layers, rpc.Layer{Server: levelRPC(c.level)})
		}
		if c.has(Retry) {
			layers = append(layers, rpc.Lookup[func([]retry.Option) rpc.Layer]("retry")(nil))
		}
		if c.has(ShortCircuit) {
			layers = append(layers, rpc.Lookup[func([]shortcircuit.Option) rpc.Layer]("shortcircuit")(c.shortcircuitOptions()))
		}
		if c.dedup.store != nil {
			layers = append(layers, rpc.Lookup[func(dedup.Store, []dedup.Option) rpc.Layer]("dedup")(c.dedup.store, c.dedupOptions()))
		}
		if c.edge {
			layers = append(layers, rpc.Layer{Server: edgeRPCInner})
		}
		return layers
	})
}
