package dedup

import (
	"context"
	"net/http"

	"github.com/deadlinekit/deadlinekit/internal/idempotency"
	"github.com/deadlinekit/deadlinekit/internal/keychain"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// PassKeys returns the middleware of a server that does not deduplicate but passes
// keyed writes on, such as a gateway in front of a deduplicating service: a request
// carrying a well-formed Idempotency-Key runs with the derivation of "Keys travel",
// so that its handler's downstream writes carry keys derived from the request's key
// in its scope ([WithScope]), the same when its caller sends the request again.
// A repeat of a payment sent through the gateway then reaches the deduplicating
// service with the key its first run sent, and gets the first's answer; without
// it, each run of the gateway's handler sends a key of its own, and the service
// runs the payment twice.
//
// A request without a key, or with a malformed one, runs unchanged (a server that
// must refuse malformed keys deduplicates, or is an edge). [WithoutKeyDerivation]
// turns it into a pass-through; the other options are ignored. Nothing is stored:
// two runs of the same key at once both run, and both send the same derived keys.
func PassKeys(opts ...Option) func(http.Handler) http.Handler {
	c := &core{c: newConfig(opts)}
	return func(next http.Handler) http.Handler {
		if c.c.noDerive {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if ctx, ok := c.passKeys(r.Context(), r.Header[idempotency.Header]); ok {
				r = r.WithContext(ctx)
			}
			next.ServeHTTP(w, r)
		})
	}
}

// PassKeysUnaryServerInterceptor is [PassKeys] for a gRPC server: a call carrying
// well-formed idempotency-key metadata runs with its keys' derivation.
func PassKeysUnaryServerInterceptor(opts ...Option) grpc.UnaryServerInterceptor {
	c := &core{c: newConfig(opts)}
	if c.c.noDerive {
		return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			return handler(ctx, req)
		}
	}
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if kctx, ok := c.passKeys(ctx, md[idempotency.Key]); ok {
			ctx = kctx
		}
		return handler(ctx, req)
	}
}

// passKeys returns ctx with the derivation of the keys of a request whose key
// values are vs, or false when there is none to derive from (no key, a malformed
// one, a run that already derives).
func (c *core) passKeys(ctx context.Context, vs []string) (context.Context, bool) {
	if len(vs) == 0 || keychain.From(ctx) != nil {
		return ctx, false
	}
	key, err := ParseKey(vs)
	if err != nil {
		return ctx, false
	}
	return keychain.With(ctx, c.storeKey(ctx, key), key), true
}
