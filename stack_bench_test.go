package deadlinekit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
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

const benchMethod = "/grpc.testing.TestService/UnaryCall"

// handNested is the stack of [deadlinekit.ServerOptions] and [deadlinekit.DialOptions]
// with their defaults, nested by hand from the packages' adapters.
func handNested() ([]grpc.ServerOption, []grpc.DialOption) {
	floor, reserve := deadlinekit.DefaultFloor, deadlinekit.DefaultReserve
	po := []propagate.Option{propagate.WithFloor(floor), propagate.WithReserve(reserve)}
	so := []shortcircuit.Option{shortcircuit.WithFloor(floor)}
	server := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(propagate.UnaryServerInterceptor(po...), retry.UnaryServerInterceptor(), shortcircuit.UnaryServerInterceptor(so...)),
		grpc.ChainStreamInterceptor(propagate.StreamServerInterceptor(po...), shortcircuit.StreamServerInterceptor(so...)),
	}
	b := breaker.New()
	client := []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(
			retry.UnaryClientInterceptor(retry.WithMinAttemptBudget(floor+reserve), retry.WithIdempotentMethods(benchMethod)),
			b.UnaryClientInterceptor(),
			hedge.New(hedge.WithFloor(floor+reserve), hedge.WithIdempotentMethods(benchMethod)).UnaryClientInterceptor(),
			propagate.UnaryClientInterceptor(po...)),
		grpc.WithChainStreamInterceptor(b.StreamClientInterceptor(), propagate.StreamClientInterceptor(po...)),
	}
	return server, client
}

// BenchmarkConstructors pairs one loopback gRPC unary call through the stack built
// by ServerOptions and DialOptions with the same call through the same layers nested
// by hand (pairbench: alternately, call by call), untraced and traced (otelgrpc on
// both sides, a recording SDK, inside a recording span). The constructors should
// cost nothing: they only assemble the chain.
//
//	go test -run '^$' -bench Constructors -benchtime 20000x -count 5 .
func BenchmarkConstructors(b *testing.B) {
	for _, traced := range []bool{false, true} {
		name := "untraced"
		if traced {
			name = "traced"
		}
		b.Run(name, func(b *testing.B) {
			hs, hc := handNested()
			byHand := startBenchCall(b, hs, hc, traced)
			built := startBenchCall(b, deadlinekit.ServerOptions(), deadlinekit.DialOptions(deadlinekit.WithIdempotentMethods(benchMethod)), traced)
			b.ReportAllocs()
			pairbench.Run(b, byHand, built)
		})
	}
}

func startBenchCall(b *testing.B, sopts []grpc.ServerOption, copts []grpc.DialOption, traced bool) func() error {
	copts = append(copts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	var tp *sdktrace.TracerProvider
	if traced {
		tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		b.Cleanup(func() { tp.Shutdown(context.Background()) })
		sopts = append(sopts, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp))))
		copts = append(copts, grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp))))
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
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if tp != nil {
			var span trace.Span
			ctx, span = tp.Tracer("bench").Start(ctx, "handle")
			defer span.End()
		}
		_, err := client.UnaryCall(ctx, req)
		return err
	}
}

// BenchmarkBreakerInStack pairs the stack of ServerOptions and DialOptions with the
// same stack without its breaker layer (pairbench), untraced and traced: what the
// breaker's closed path adds to a whole loopback gRPC call.
//
//	go test -run '^$' -bench BreakerInStack -benchtime 20000x -count 5 .
func BenchmarkBreakerInStack(b *testing.B) {
	for _, traced := range []bool{false, true} {
		name := "untraced"
		if traced {
			name = "traced"
		}
		b.Run(name, func(b *testing.B) {
			idem := deadlinekit.WithIdempotentMethods(benchMethod)
			without := startBenchCall(b, deadlinekit.ServerOptions(), deadlinekit.DialOptions(idem, deadlinekit.Without(deadlinekit.Breaker)), traced)
			with := startBenchCall(b, deadlinekit.ServerOptions(), deadlinekit.DialOptions(idem), traced)
			b.ReportAllocs()
			pairbench.Run(b, without, with)
		})
	}
}
