package breaker_test

import (
	"context"
	"errors"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/breaker"
)

// sizedServer answers every call with a payload of the size the request asks for.
type sizedServer struct {
	testgrpc.UnimplementedTestServiceServer
}

func (sizedServer) UnaryCall(_ context.Context, r *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: make([]byte, r.GetResponseSize())}}, nil
}

// grpc-go fails a call whose message is larger than the limit set for it with
// RESOURCE_EXHAUSTED, made by the client itself (an answer too large to receive,
// a request too large to send) or by the server (a request too large for it, sent
// over the wire): the
// target did not refuse anything for load, and the throttle must not hold its
// other calls back for it.
func TestThrottleIgnoresMessageSizeLimits(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(2048))
	testgrpc.RegisterTestServiceServer(gs, sizedServer{})
	go gs.Serve(lis)
	defer gs.Stop()
	b := breaker.New()
	client := dialGRPC(t, lis.Addr().String(), b)
	ctx := context.Background()
	big := &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: make([]byte, 4096)}}
	for i := range 45 {
		var err error
		switch i % 3 {
		case 0: // an answer larger than the client takes
			_, err = client.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 4096}, grpc.MaxCallRecvMsgSize(1024))
		case 1: // a request larger than the client sends
			_, err = client.UnaryCall(ctx, big, grpc.MaxCallSendMsgSize(1024))
		default: // a request larger than the server takes
			_, err = client.UnaryCall(ctx, big)
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("call %d: %v, want grpc-go's RESOURCE_EXHAUSTED for the message's size", i, err)
		}
	}
	for i := range 20 {
		if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 16}); err != nil {
			c, _ := b.Circuit(b.Circuits()[0].Target)
			t.Fatalf("call %d of a healthy target: %v (throttle %+v, throttled: %v)", i, err, c.Throttle, errors.Is(err, breaker.ErrThrottled))
		}
	}
}
