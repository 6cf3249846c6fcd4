package connectkit_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/connectkit"
)

// A handler that forwards its incoming gRPC metadata into its outgoing context (a
// common proxying pattern) sends it through connectkit as headers; the attempt count
// the retry layer writes replaces the forwarded one rather than being sent beside
// it, and the forwarded metadata that is the protocol's own (content type, pseudo
// headers, timeouts) is not sent: connect-go writes its own.
func TestForwardedIncomingMetadata(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			var mu sync.Mutex
			var seen [][]string
			n := 0
			url, hc := serve(t, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
				mu.Lock()
				n++
				first := n == 1
				seen = append(seen, req.Header().Values("Grpc-Previous-Rpc-Attempts"))
				mu.Unlock()
				if got := req.Header().Get("X-Tenant"); got != "t1" {
					return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("x-tenant = "+got))
				}
				if first {
					return nil, connect.NewError(connect.CodeUnavailable, errors.New("warming up"))
				}
				return ok(ctx, req)
			})
			// What a grpc-go handler finds in its incoming metadata when its caller
			// retried: forwarded as it is.
			in := metadata.Pairs("grpc-previous-rpc-attempts", "2", "x-tenant", "t1",
				"content-type", "application/grpc", ":authority", "b.internal", "user-agent", "grpc-go/1.85.0",
				"grpc-timeout", "99S", "te", "trailers")
			ctx := metadata.NewOutgoingContext(context.Background(), in)
			c := client(hc, url, procGet, p.opt, connectkit.ClientOption(deadlinekit.WithRetry(fastBackoff)))
			if _, err := c.CallUnary(ctx, connect.NewRequest(wrapperspb.String("a"))); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			// The caller's count is not this call's: the first attempt sends none,
			// the retry its own, once.
			want := [][]string{nil, {"1"}}
			if !slices.EqualFunc(seen, want, slices.Equal[[]string]) {
				t.Errorf("grpc-previous-rpc-attempts of each attempt: %q; want %q", seen, want)
			}
		})
	}
}
