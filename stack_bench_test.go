package deadlinekit_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/pairbench"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

type okService struct {
	testgrpc.UnimplementedTestServiceServer
	work time.Duration // how long the handler takes
}

func (s okService) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if s.work > 0 {
		time.Sleep(s.work)
	}
	return &testgrpc.SimpleResponse{}, nil
}

// BenchmarkStack measures one loopback gRPC unary call with deadlinekit's whole
// client stack (retry → hedge → propagate) and server stack (propagate →
// shortcircuit), against the same call without them, call by call (pairbench):
// once without tracing, once under otelgrpc with a recording SDK (spans sampled,
// recorded, then dropped, so that no exporter is measured).
//
//	go test -run '^$' -bench Stack -benchtime 20000x -count 5 .
func BenchmarkStack(b *testing.B) { pairedStack(b, allLayers, 0) }

// BenchmarkStackBusyHandler is [BenchmarkStack] with a handler that takes 1 ms, for
// the stack's cost on a call that does some work.
//
//	go test -run '^$' -bench StackBusyHandler -benchtime 5000x -count 5 .
func BenchmarkStackBusyHandler(b *testing.B) { pairedStack(b, allLayers, time.Millisecond) }

// BenchmarkStackLayers adds deadlinekit's layers one at a time to the call of
// [BenchmarkStack], each variant paired with the bare call (untraced, then traced),
// to show where the whole stack's cost comes from.
//
//	go test -run '^$' -bench StackLayers -benchtime 20000x -count 5 .
func BenchmarkStackLayers(b *testing.B) {
	for _, v := range []struct {
		name string
		l    layers
	}{
		{"propagate", layers{propagate: true}},
		{"+shortcircuit", layers{propagate: true, shortcircuit: true}},
		{"+retry", layers{propagate: true, shortcircuit: true, retry: true}},
		{"+hedge", allLayers},
		{"hedge-only", layers{hedge: true}},
	} {
		b.Run(v.name, func(b *testing.B) { pairedStack(b, v.l, 0) })
	}
}

// pairedStack runs the sub-benchmarks "untraced" and "traced": the call with the
// layers l paired with the bare call, the handler taking work.
func pairedStack(b *testing.B, l layers, work time.Duration) {
	pairedTraced(b, func() ([]grpc.UnaryClientInterceptor, []grpc.UnaryServerInterceptor) { return stackInterceptors(l) }, work)
}

// pairedTraced runs the sub-benchmarks "untraced" and "traced": the call with the
// interceptors that newInterceptors returns (fresh ones for each) paired with the bare call, the
// handler taking work.
func pairedTraced(b *testing.B, newInterceptors func() ([]grpc.UnaryClientInterceptor, []grpc.UnaryServerInterceptor), work time.Duration) {
	untracedAndTraced(b, func(b *testing.B, traced bool) {
		cis, sis := newInterceptors()
		pairCall(b, cis, sis, traced, work)
	})
}

// untracedAndTraced runs run as the sub-benchmarks "untraced" and "traced".
func untracedAndTraced(b *testing.B, run func(b *testing.B, traced bool)) {
	for _, traced := range []bool{false, true} {
		name := "untraced"
		if traced {
			name = "traced"
		}
		b.Run(name, func(b *testing.B) { run(b, traced) })
	}
}

// pairCall pairs the call with the client interceptors cis and the server
// interceptors sis with the bare call (pairbench), traced or not, the handler taking
// work.
func pairCall(b *testing.B, cis []grpc.UnaryClientInterceptor, sis []grpc.UnaryServerInterceptor, traced bool, work time.Duration) {
	bare, with := startCall(b, nil, nil, traced, work), startCall(b, cis, sis, traced, work)
	b.ReportAllocs()
	pairbench.Run(b, bare, with)
}

// layers says which of deadlinekit's layers a benchmark stack has: propagate on both
// sides, shortcircuit on the server, retry and hedge on the client.
type layers struct{ propagate, shortcircuit, retry, hedge bool }

var allLayers = layers{true, true, true, true}

const stackMethod = "/grpc.testing.TestService/UnaryCall"

// stackInterceptors returns new interceptors of the layers l: the client's in
// DESIGN's order (retry → hedge → propagate) and the server's (propagate →
// shortcircuit).
func stackInterceptors(l layers) (cis []grpc.UnaryClientInterceptor, sis []grpc.UnaryServerInterceptor) {
	if l.propagate {
		sis = append(sis, propagate.UnaryServerInterceptor())
	}
	if l.shortcircuit {
		sis = append(sis, shortcircuit.UnaryServerInterceptor(shortcircuit.WithFloor(time.Millisecond)))
	}
	if l.retry {
		cis = append(cis, retry.UnaryClientInterceptor())
	}
	if l.hedge {
		cis = append(cis, hedge.UnaryClientInterceptor(hedge.WithIdempotentMethods(stackMethod)))
	}
	if l.propagate {
		cis = append(cis, propagate.UnaryClientInterceptor())
	}
	return cis, sis
}

// startCall starts a loopback gRPC server with the interceptors sis, whose handler
// takes work, and a client with the interceptors cis, both traced by otelgrpc with a
// recording SDK when traced is set, and returns one call.
func startCall(b testing.TB, cis []grpc.UnaryClientInterceptor, sis []grpc.UnaryServerInterceptor, traced bool, work time.Duration) func() error {
	var sopts []grpc.ServerOption
	var copts []grpc.DialOption
	if len(sis) > 0 {
		sopts = append(sopts, grpc.ChainUnaryInterceptor(sis...))
	}
	if len(cis) > 0 {
		copts = append(copts, grpc.WithChainUnaryInterceptor(cis...))
	}
	return startCallWith(b, sopts, copts, traced, work)
}

// startCallWith is [startCall] with the server's and the client's options given
// whole (the root package's ServerOptions and DialOptions, say).
func startCallWith(b testing.TB, sopts []grpc.ServerOption, copts []grpc.DialOption, traced bool, work time.Duration) func() error {
	var tp *sdktrace.TracerProvider
	if traced {
		tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		b.Cleanup(func() { tp.Shutdown(context.Background()) })
		sopts = append(sopts, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp))))
		copts = append(copts, grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp))))
	}
	client := testService(b, okService{work: work}, sopts, copts...)
	req := &testgrpc.SimpleRequest{}
	return func() error {
		// A budget under the servers' 5-minute clamp, as real budgets are.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if tp != nil {
			// The call is made inside a recording span, as a traced service's is.
			var span trace.Span
			ctx, span = tp.Tracer("bench").Start(ctx, "handle")
			defer span.End()
		}
		_, err := client.UnaryCall(ctx, req)
		return err
	}
}
