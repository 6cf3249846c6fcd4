package deadlinekit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deadlinekit/deadlinekit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A gateway that does not deduplicate (no WithDedup: the new user's shape)
// still passes its caller's key on: a payment the caller sends again with its key
// reaches the deduplicating service below with the key the first run sent, and is
// charged once. Without(deadlinekit.Keys) is the control: each run of the gateway
// sends a key of its own, and the service charges twice.

// httpGateway starts a gateway over HTTP, the stack without dedup, whose handler
// writes once to B per run.
func httpGateway(t *testing.T, toB write, opts ...deadlinekit.Option) call {
	srv := httptest.NewServer(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, err := toB(r.Context(), "charge 5", "")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		fmt.Fprint(w, out)
	}), opts...))
	t.Cleanup(srv.Close)
	return func(key, _ string) (string, error) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader("pay"))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("gateway answered %d %s", resp.StatusCode, out)
		}
		return string(out), nil
	}
}

type gatewayService struct {
	testgrpc.UnimplementedTestServiceServer
	toB write
}

func (g gatewayService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	out, err := g.toB(ctx, "charge 5", "")
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &testgrpc.SimpleResponse{Username: out}, nil
}

// grpcGateway is httpGateway over gRPC.
func grpcGateway(t *testing.T, toB write, opts ...deadlinekit.Option) call {
	l := listen(t)
	gs := grpc.NewServer(deadlinekit.ServerOptions(opts...)...)
	testgrpc.RegisterTestServiceServer(gs, gatewayService{toB: toB})
	go gs.Serve(l)
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	client := testgrpc.NewTestServiceClient(cc)
	return func(key, _ string) (string, error) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", key)
		resp, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		return resp.GetUsername(), err
	}
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
