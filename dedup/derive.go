package dedup

import (
	"context"
	"sync/atomic"

	"github.com/deadlinekit/deadlinekit/internal/keychain"
)

// runCtx makes rc, a zero runContext that the adapter allocates with what else
// the run needs, the context the handler of t's run gets: itself (for [Forget])
// and, unless [WithoutKeyDerivation], the derivation of its downstream keys from
// t's key in its scope ([DerivedKey], package retry's WithIdempotencyKeys).
func (c *core) runCtx(ctx context.Context, t *ticket, rc *runContext) context.Context {
	rc.Context, rc.derive = ctx, !c.c.noDerive
	if rc.derive {
		rc.chain.Init(t.key, t.inbound)
	}
	return rc
}

// runContext is the context of a keyed run: its parent's, answering runKey with
// itself and, when derive, [keychain.Key] with the run's chain. It holds what the
// handler may reach while it runs, and after.
type runContext struct {
	context.Context
	forgot atomic.Bool // [Forget]: release the key when the handler returns
	derive bool
	chain  keychain.Chain
}

// Value implements [context.Context].
func (rc *runContext) Value(key any) any {
	switch key.(type) {
	case runKey:
		return rc
	case keychain.Key:
		if rc.derive {
			return &rc.chain
		}
	}
	return rc.Context.Value(key)
}

// WithoutKeyDerivation turns off the keys that travel: the handler's downstream
// writes get keys of their own (package retry's random ones) instead of keys
// derived from the request's key, and a key forwarded from the request goes out
// unchanged. A re-run of the handler after a crash then repeats its downstream
// writes. Default: on (see "Keys travel" in the package documentation).
func WithoutKeyDerivation() Option {
	return optionFunc(func(c *config) { c.noDerive = true })
}

// DerivedKey returns the idempotency key named label of the request whose context
// is ctx, derived from that request's key in its scope: the same on every run of
// the handler for the same key, whatever the order of its writes. Give it to a
// write whose place in the order of the handler's writes is not fixed (one of
// several sent from goroutines at once), as its Idempotency-Key header or
// idempotency-key metadata; labels must differ between the writes of one request.
//
// It returns "" outside the run of a keyed request under dedup (no key, a replay,
// [WithoutKeyDerivation]): a call with a blank key gets one from package retry's
// generator, as a call without one does.
func DerivedKey(ctx context.Context, label string) string {
	if c := keychain.From(ctx); c != nil {
		return c.Labelled(label)
	}
	return ""
}
