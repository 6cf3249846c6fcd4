package chaintest_test

import (
	"context"
	"io"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/deadlinekit/deadlinekit/propagate"
)

type streamer struct {
	testgrpc.UnimplementedTestServiceServer
}

func (streamer) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, s testgrpc.TestService_StreamingOutputCallServer) error {
	for range 3 {
		if err := s.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	return nil
}

// A stream through propagate's client interceptor under otelgrpc has a call span of
// its own, carrying the budget it was sent with and ending with the stream; the
// caller's span carries nothing of it.
func TestStreamCallSpan(t *testing.T) {
	tp, rec := recorder(t)
	gs := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(gs, streamer{})
	conn := dial(t, serveGRPC(t, gs), grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp))),
		grpc.WithChainStreamInterceptor(propagate.StreamClientInterceptor(propagate.WithReserve(5*time.Millisecond))))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ctx, handle := tp.Tracer("test").Start(ctx, "handle")
	s, err := testgrpc.NewTestServiceClient(conn).StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := s.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	handle.End()

	var call, rpc sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		switch sp.Name() {
		case "Sent.grpc.testing.TestService.StreamingOutputCall":
			call = sp
		case "grpc.testing.TestService/StreamingOutputCall":
			rpc = sp
		case "handle":
			if len(sp.Attributes()) != 0 {
				t.Errorf("the caller's span carries %v", sp.Attributes())
			}
		}
	}
	if call == nil || rpc == nil {
		t.Fatalf("call span %v, otelgrpc span %v; want both", call != nil, rpc != nil)
	}
	if v, ok := value(call, "deadlinekit.budget.sent_ms"); !ok || v.AsFloat64() <= 0 || v.AsFloat64() > 1995 {
		t.Errorf("call span budget sent %v (%v); want under 2 s − 5 ms", v.AsFloat64(), ok)
	}
	if rpc.Parent().SpanID() != call.SpanContext().SpanID() || call.Parent().SpanID() != handle.SpanContext().SpanID() {
		t.Error("want the caller's span → the call span → otelgrpc's span")
	}
}
