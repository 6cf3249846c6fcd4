package otelattr_test

import (
	"context"
	"net"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/pairbench"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

type okService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (okService) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{}, nil
}

// BenchmarkStack measures one loopback gRPC unary call with deadlinekit's whole
// client stack (retry → hedge → propagate) and server stack (propagate →
// shortcircuit), against the same call without them, call by call (pairbench):
// once without tracing, once under otelgrpc with a recording SDK (spans sampled,
// recorded, then dropped, so that no exporter is measured).
//
//	go test -run '^$' -bench Stack -benchtime 20000x -count 5 ./otelattr
func BenchmarkStack(b *testing.B) {
	const method = "/grpc.testing.TestService/UnaryCall"
	start := func(b *testing.B, toolkit, traced bool) func() error {
		var sopts []grpc.ServerOption
		copts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if traced {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
			b.Cleanup(func() { tp.Shutdown(context.Background()) })
			sopts = append(sopts, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp))))
			copts = append(copts, grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp))))
		}
		if toolkit {
			sopts = append(sopts, grpc.ChainUnaryInterceptor(
				propagate.UnaryServerInterceptor(),
				shortcircuit.UnaryServerInterceptor(shortcircuit.WithFloor(time.Millisecond))))
			copts = append(copts, grpc.WithChainUnaryInterceptor(
				retry.UnaryClientInterceptor(),
				hedge.UnaryClientInterceptor(hedge.WithIdempotentMethods(method)),
				propagate.UnaryClientInterceptor()))
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		gs := grpc.NewServer(sopts...)
		testgrpc.RegisterTestServiceServer(gs, okService{})
		go gs.Serve(lis)
		b.Cleanup(gs.Stop)
		conn, err := grpc.NewClient(lis.Addr().String(), copts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		client := testgrpc.NewTestServiceClient(conn)
		req := &testgrpc.SimpleRequest{}
		return func() error {
			// A budget under the servers' 5-minute clamp, as real budgets are.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := client.UnaryCall(ctx, req)
			return err
		}
	}
	for _, traced := range []bool{false, true} {
		name := "untraced"
		if traced {
			name = "traced"
		}
		b.Run(name, func(b *testing.B) {
			bare, with := start(b, false, traced), start(b, true, traced)
			b.ReportAllocs()
			pairbench.Run(b, bare, with)
		})
	}
}
