package connectkit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/dedup"
)

// TestDedupHandler: connectkit.HandlerOption with deadlinekit.WithDedup runs a keyed
// procedure once and replays its answer (message, header, trailer) or its error to
// every repeat, in the Connect, gRPC and gRPC-Web protocols.
func TestDedupHandler(t *testing.T) {
	for _, proto := range []struct {
		name string
		opt  []connect.ClientOption
	}{{"connect", nil}, {"grpc", []connect.ClientOption{connect.WithGRPC()}}, {"grpcweb", []connect.ClientOption{connect.WithGRPCWeb()}}} {
		t.Run(proto.name, func(t *testing.T) {
			var n atomic.Int64
			const proc = "/pay.Payments/Charge"
			mux := http.NewServeMux()
			mux.Handle(proc, connect.NewUnaryHandler(proc,
				func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
					i := n.Add(1)
					if req.Msg.GetValue() == "decline" {
						return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("declined %d", i))
					}
					resp := connect.NewResponse(wrapperspb.String(fmt.Sprint("charge ", i)))
					resp.Header().Set("X-Charge", fmt.Sprint(i))
					resp.Trailer().Set("X-Ledger", fmt.Sprint("entry-", i))
					return resp, nil
				}, connectkit.HandlerOption(deadlinekit.WithDedup(dedup.NewMemoryStore()))))
			srv := httptest.NewUnstartedServer(mux)
			var protocols http.Protocols
			protocols.SetUnencryptedHTTP2(true)
			protocols.SetHTTP1(true)
			srv.Config.Protocols = &protocols
			srv.Start()
			defer srv.Close()
			tr := &http.Transport{Protocols: &protocols}
			defer tr.CloseIdleConnections()
			client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](&http.Client{Transport: tr}, srv.URL+proc, proto.opt...)
			call := func(key, msg string) (*connect.Response[wrapperspb.StringValue], error) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				req := connect.NewRequest(wrapperspb.String(msg))
				req.Header().Set("Idempotency-Key", key)
				return client.CallUnary(ctx, req)
			}
			for i := range 3 {
				resp, err := call("k", "100")
				if err != nil {
					t.Fatal(err)
				}
				if resp.Msg.GetValue() != "charge 1" || resp.Header().Get("X-Charge") != "1" || resp.Trailer().Get("X-Ledger") != "entry-1" {
					t.Fatalf("call %d: %q header %v trailer %v", i, resp.Msg.GetValue(), resp.Header(), resp.Trailer())
				}
				if replayed := resp.Header().Get("Idempotent-Replayed") == "true"; replayed != (i > 0) {
					t.Fatalf("call %d: replayed %v", i, replayed)
				}
			}
			_, err1 := call("d", "decline")
			_, err2 := call("d", "decline")
			if connect.CodeOf(err1) != connect.CodeFailedPrecondition || connect.CodeOf(err2) != connect.CodeFailedPrecondition {
				t.Fatalf("declines: %v, %v", err1, err2)
			}
			if _, err := call("k", "other"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Fatalf("another message under the key: %v", err)
			}
			if n.Load() != 2 {
				t.Fatalf("handler ran %d times, want 2", n.Load())
			}
		})
	}
}
