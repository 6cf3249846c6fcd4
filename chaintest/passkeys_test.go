package chaintest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/deadlinekit/deadlinekit"
)

// A gateway that does not deduplicate (no WithDedup: the new user's shape)
// still passes its caller's key on: a payment the caller sends again with its key
// reaches the deduplicating service below with the key the first run sent, and is
// charged once. Without(deadlinekit.Keys) is the control: each run of the gateway
// sends a key of its own, and the service charges twice.

// chargeOnce is the gateway's handler: one write to B per run.
func chargeOnce(toB write) keysHandler {
	return func(ctx context.Context, _ string) (string, error) { return toB(ctx, "charge 5", "") }
}

// httpGateway starts a gateway over HTTP, the stack with opts and no dedup.
func httpGateway(t *testing.T, toB write, opts ...deadlinekit.Option) call {
	return httpServe(t, chargeOnce(toB), opts...)
}

// grpcGateway is httpGateway over gRPC.
func grpcGateway(t *testing.T, toB write, opts ...deadlinekit.Option) call {
	return grpcServe(t, chargeOnce(toB), opts...)
}

func TestGatewayPassesKeysWithoutDedup(t *testing.T) {
	for _, ch := range []struct {
		name string
		gw   func(t *testing.T, toB write, opts ...deadlinekit.Option) call
		b    func(t *testing.T, b *keysB, opts ...deadlinekit.Option) write
	}{{"http-grpc", httpGateway, grpcBWith}, {"grpc-http", grpcGateway, httpBWith}} {
		for _, tc := range []struct {
			name     string
			opts     []deadlinekit.Option
			wantRuns int
		}{{"default", nil, 1}, {"without-keys", []deadlinekit.Option{deadlinekit.Without(deadlinekit.Keys)}, 2}} {
			t.Run(ch.name+"/"+tc.name, func(t *testing.T) {
				b := &keysB{}
				gw := ch.gw(t, ch.b(t, b), tc.opts...)
				first := mustCall(t, gw, "pay-1", "")
				again := mustCall(t, gw, "pay-1", "") // the caller lost the answer and sends again
				seen := b.seen()
				if len(seen) != tc.wantRuns {
					t.Fatalf("B ran %d times (%q), want %d", len(seen), seen, tc.wantRuns)
				}
				if tc.wantRuns == 1 {
					if again != first {
						t.Fatalf("the repeat got %q, want the first's answer %q", again, first)
					}
					if k := seen[0][strings.LastIndex(seen[0], " ")+1:]; !strings.HasPrefix(k, "dk1.") {
						t.Fatalf("B saw %q, want a key derived from the caller's", seen[0])
					}
				}
				// Another payment is another key below.
				mustCall(t, gw, "pay-2", "")
				if n := b.count(); n != tc.wantRuns+1 {
					t.Fatalf("after a second payment B ran %d times, want %d", n, tc.wantRuns+1)
				}
			})
		}
	}
}
