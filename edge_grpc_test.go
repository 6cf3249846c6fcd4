package deadlinekit_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/dedup"
)

// A gRPC edge, called by an end user's plain grpc-go client: the guard's refusal and
// dedup's in public words, with their codes and details; the handler's own status
// and its replay kept; a doubled or malformed key InvalidArgument before anything
// runs; no internal trailer or header.
func TestEdgeGRPC(t *testing.T) {
	for _, edge := range []bool{true, false} {
		t.Run(map[bool]string{true: "edge", false: "internal"}[edge], func(t *testing.T) {
			led := &ledger{}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			opts := []deadlinekit.Option{deadlinekit.WithFloor(time.Second), deadlinekit.WithDedup(dedup.NewMemoryStore())}
			if edge {
				opts = append(opts, deadlinekit.WithEdge())
			}
			gs := grpc.NewServer(deadlinekit.ServerOptions(opts...)...)
			testgrpc.RegisterTestServiceServer(gs, led)
			go gs.Serve(l)
			defer gs.Stop()
			cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			client := testgrpc.NewTestServiceClient(cc)
			call := func(budget time.Duration, body string, keys ...string) (*status.Status, metadata.MD, metadata.MD) {
				ctx, cancel := context.WithTimeout(context.Background(), budget)
				defer cancel()
				for _, k := range keys {
					ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", k)
				}
				var header, trailer metadata.MD
				_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte(body)}}, grpc.Header(&header), grpc.Trailer(&trailer))
				return status.Convert(err), header, trailer
			}
			call(5*time.Second, "decline") // connected: the budgets below are the server's to judge
			for _, c := range []struct {
				name     string
				budget   time.Duration
				body     string
				keys     []string
				code     codes.Code
				public   string
				internal string
			}{
				{"too little time", 500 * time.Millisecond, "100", nil, codes.DeadlineExceeded, "not enough time left to serve the request", "shortcircuit: "},
				{"two keys", 5 * time.Second, "100", []string{"a", "b"}, codes.InvalidArgument, "malformed Idempotency-Key: 2 values, want one", "idempotency-key: malformed Idempotency-Key: 2 values"},
				{"a space in the key", 5 * time.Second, "100", []string{"a b"}, codes.InvalidArgument, "malformed Idempotency-Key: character ' ' (U+0020) at position 1 is not visible ASCII", "idempotency-key: malformed"},
				{"a decline", 5 * time.Second, "decline", []string{"order-1"}, codes.FailedPrecondition, "card declined", "card declined"},
				{"its replay", 5 * time.Second, "decline", []string{"order-1"}, codes.FailedPrecondition, "card declined", "card declined"},
				{"the key for another payment", 5 * time.Second, "100", []string{"order-1"}, codes.FailedPrecondition, "this Idempotency-Key was used for a different request", "dedup: this idempotency-key was used"},
			} {
				st, header, trailer := call(c.budget, c.body, c.keys...)
				want := c.internal
				if edge {
					want = c.public
				}
				if st.Code() != c.code || !strings.HasPrefix(st.Message(), want) {
					t.Errorf("%s: %v %q; want %v %q…", c.name, st.Code(), st.Message(), c.code, want)
				}
				if c.name == "the key for another payment" && !dedup.IsKeyReused(st.Err()) {
					t.Errorf("%s: the key-reused ErrorInfo was lost: %v", c.name, st.Details())
				}
				if c.name == "its replay" && len(header.Get(dedup.ReplayedKey)) == 0 {
					t.Errorf("%s: not marked replayed: %v", c.name, header)
				}
				if edge {
					for _, md := range []metadata.MD{header, trailer} {
						for k := range md {
							if strings.HasPrefix(k, "deadlinekit-") || k == "grpc-retry-pushback-ms" {
								t.Errorf("%s: the edge sent %s", c.name, k)
							}
						}
					}
				}
			}
			if n := led.n.Load(); n != 0 {
				t.Errorf("the ledger charged %d times, want 0", n)
			}
		})
	}
}

// ledger is the gRPC service behind the edge: it counts charges.
type ledger struct {
	testgrpc.UnimplementedTestServiceServer
	n atomic.Int32
}

func (l *ledger) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if string(req.GetPayload().GetBody()) == "decline" {
		return nil, status.Error(codes.FailedPrecondition, "card declined")
	}
	n := l.n.Add(1)
	return &testgrpc.SimpleResponse{Username: fmt.Sprint("charge ", n)}, nil
}
