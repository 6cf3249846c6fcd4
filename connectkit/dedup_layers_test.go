package connectkit_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/dedup"
)

// TestDedupBothLayers: a user who puts WithDedup on the HTTP stack
// (deadlinekit.NewHandler) and on the connect handler (connectkit.HandlerOption), on one
// store, as the README shows each, gets one deduplication: the keyed call runs once and
// its repeats are replayed, never refused as "a different call" because the two layers
// fingerprint the request differently.
func TestDedupBothLayers(t *testing.T) {
	for _, proto := range []struct {
		name string
		opt  []connect.ClientOption
	}{{"connect", nil}, {"grpc", []connect.ClientOption{connect.WithGRPC()}}, {"grpcweb", []connect.ClientOption{connect.WithGRPCWeb()}}} {
		t.Run(proto.name, func(t *testing.T) {
			store := dedup.NewMemoryStore()
			var n atomic.Int64
			const proc = "/pay.Payments/Charge"
			mux := http.NewServeMux()
			mux.Handle(proc, connect.NewUnaryHandler(proc,
				func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
					return connect.NewResponse(wrapperspb.String(fmt.Sprint("charge ", n.Add(1)))), nil
				}, connectkit.HandlerOption(deadlinekit.WithDedup(store))))
			srv := httptest.NewUnstartedServer(deadlinekit.NewHandler(mux, deadlinekit.WithDedup(store)))
			var protocols http.Protocols
			protocols.SetUnencryptedHTTP2(true)
			protocols.SetHTTP1(true)
			srv.Config.Protocols = &protocols
			srv.Start()
			defer srv.Close()
			tr := &http.Transport{Protocols: &protocols}
			defer tr.CloseIdleConnections()
			client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](&http.Client{Transport: tr}, srv.URL+proc, proto.opt...)
			for i := range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				req := connect.NewRequest(wrapperspb.String("100"))
				req.Header().Set("Idempotency-Key", "k")
				resp, err := client.CallUnary(ctx, req)
				cancel()
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if resp.Msg.GetValue() != "charge 1" {
					t.Fatalf("call %d: %q, want the first answer", i, resp.Msg.GetValue())
				}
			}
			if got := n.Load(); got != 1 {
				t.Fatalf("the handler ran %d times, want 1", got)
			}
		})
	}
}

// TestDedupBothLayersGRPC: the same for a grpc-go server mounted on the HTTP stack
// (grpc.Server.ServeHTTP behind deadlinekit.NewHandler with WithDedup) that has
// WithDedup in its own ServerOptions too.
func TestDedupBothLayersGRPC(t *testing.T) {
	store := dedup.NewMemoryStore()
	var n atomic.Int64
	gs := grpc.NewServer(deadlinekit.ServerOptions(deadlinekit.WithDedup(store))...)
	gs.RegisterService(&grpc.ServiceDesc{
		ServiceName: "pay.Payments", HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Charge", Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, _ any) (any, error) {
				return wrapperspb.String(fmt.Sprint("charge ", n.Add(1))), nil
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/pay.Payments/Charge"}, h)
		}}},
	}, nil)
	srv := httptest.NewUnstartedServer(deadlinekit.NewHandler(gs, deadlinekit.WithDedup(store)))
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &protocols
	srv.Start()
	defer srv.Close()
	conn, err := grpc.NewClient(srv.Listener.Addr().(*net.TCPAddr).String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", "k")
		out := new(wrapperspb.StringValue)
		err := conn.Invoke(ctx, "/pay.Payments/Charge", wrapperspb.String("100"), out)
		cancel()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if out.GetValue() != "charge 1" {
			t.Fatalf("call %d: %q, want the first answer", i, out.GetValue())
		}
	}
	if got := n.Load(); got != 1 {
		t.Fatalf("the handler ran %d times, want 1", got)
	}
}
