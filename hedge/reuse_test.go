package hedge_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
)

// TestCallerReusesRequestAfterClose: a caller may change and send again its request
// once the response's body is closed (http.RoundTripper's contract). A hedge still
// on its way when the call was decided must not read the request then.
func TestCallerReusesRequestAfterClose(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Grpc-Previous-Rpc-Attempts") == "" {
			_ = sleep(r.Context(), 3*time.Millisecond)
		} else {
			_ = sleep(r.Context(), time.Second)
		}
		_, _ = io.WriteString(w, r.Header.Get("X-Seq"))
	}))
	defer srv.Close()
	// Copies go out on connections of their own, and a hedge comes back late, so
	// that nothing orders its steps before the caller's next ones.
	primaries, hedges := &http.Transport{}, &http.Transport{}
	defer primaries.CloseIdleConnections()
	defer hedges.CloseIdleConnections()
	base := testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Header.Get("Grpc-Previous-Rpc-Attempts") != "" {
			resp, err := hedges.RoundTrip(r)
			time.Sleep(20 * time.Millisecond) // a transport slow to see its request cancelled
			return resp, err
		}
		return primaries.RoundTrip(r)
	})
	rt := hedge.NewTransport(base,
		hedge.WithDelay(hedge.Delay{Initial: 2 * time.Millisecond, MinSamples: 1 << 20}), hedge.WithMaxExtraLoad(1))
	testkit.Parallel(6, 6, func(int) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/x", nil)
		for i := range 60 {
			req.Header.Set("X-Seq", strconv.Itoa(i))
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

// reuseServer answers a primary after a moment and holds a hedge until its call is
// cancelled.
type reuseServer struct {
	testgrpc.UnimplementedTestServiceServer
}

func (reuseServer) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	d := 3 * time.Millisecond
	if previous(ctx) != "" {
		d = time.Second
	}
	if err := sleep(ctx, d); err != nil {
		return nil, err
	}
	return &testgrpc.SimpleResponse{Username: strconv.Itoa(int(req.GetResponseSize()))}, nil
}

// TestCallerReusesMessageAfterReturn: a gRPC caller may change its request message
// and send it again once the call has returned. A hedge still running then (a loser
// whose interceptors log the request once its invoker returns) must not be reading
// the caller's message.
func TestCallerReusesMessageAfterReturn(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(gs, reuseServer{})
	go gs.Serve(lis)
	defer gs.Stop()
	const unary = "/grpc.testing.TestService/UnaryCall"
	h := hedge.New(hedge.WithDelay(hedge.Delay{MinSamples: 1 << 20, Initial: 2 * time.Millisecond}), hedge.WithIdempotentMethods(unary), hedge.WithMaxExtraLoad(1))
	logged := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if hedged := metadata.ValueFromOutgoingContext(ctx, "grpc-previous-rpc-attempts"); len(hedged) > 0 {
			time.Sleep(20 * time.Millisecond) // a logger slow to write a loser's line
		}
		_ = proto.Size(req.(proto.Message)) // the line logs the request
		return err
	}
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(h.UnaryClientInterceptor(), logged))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := testgrpc.NewTestServiceClient(cc)
	testkit.Parallel(6, 6, func(int) {
		req := &testgrpc.SimpleRequest{}
		for i := range 60 {
			req.ResponseSize = int32(i)
			resp, err := client.UnaryCall(context.Background(), req)
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			if resp.GetUsername() != strconv.Itoa(i) {
				t.Errorf("call %d answered %q", i, resp.GetUsername())
			}
		}
	})
}
