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
// shortcircuit), against the same call without them; once without tracing, once under
// otelgrpc with a recording SDK (spans sampled, recorded, then dropped, so that no
// exporter is measured). Run the four variants side by side:
//
//	go test -run '^$' -bench Stack -count 8 ./otelattr
func BenchmarkStack(b *testing.B) {
	const method = "/grpc.testing.TestService/UnaryCall"
	for _, v := range []struct {
		name           string
		toolkit, trace bool
	}{
		{"bare", false, false},
		{"toolkit", true, false},
		{"traced/bare", false, true},
		{"traced/toolkit", true, true},
	} {
		b.Run(v.name, func(b *testing.B) {
			var sopts []grpc.ServerOption
			copts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
			if v.trace {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
				defer tp.Shutdown(context.Background())
				sopts = append(sopts, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp))))
				copts = append(copts, grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp))))
			}
			if v.toolkit {
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
			defer gs.Stop()
			conn, err := grpc.NewClient(lis.Addr().String(), copts...)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			client := testgrpc.NewTestServiceClient(conn)
			// A budget under the servers' 5-minute clamp, as real budgets are.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			req := &testgrpc.SimpleRequest{}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.UnaryCall(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
