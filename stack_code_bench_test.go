package deadlinekit_test

import (
	"context"
	"slices"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// BenchmarkStackCode runs the client and server interceptors of [BenchmarkStack] and
// of the floor ([BenchmarkStackFloor], fused) on a call that never leaves the
// process: the client chain's invoker hands the call's deadline and outgoing
// metadata to the server chain as the incoming context grpc-go would make, and
// answers at once; the chains are joined as grpc-go joins them, at its price (a
// closure per interceptor but the last, per call). What it measures is the
// interceptors' own code, without the network and grpc-go's noise: the stack's
// figures less the floor's are what the stack adds, to the nanosecond and the
// allocation. "bare" is the harness alone: each variant's figure less bare's is
// its interceptors' own cost, and the stack's over the floor's ("floor-all", every
// promise: [BenchmarkStackFloor]'s fused-all) is the ratio the goal is
// about, without the network's noise.
//
//	go test -run '^$' -bench StackCode -count 5 .
func BenchmarkStackCode(b *testing.B) {
	for _, v := range []struct {
		name  string
		cis   func() ([]grpc.UnaryClientInterceptor, []grpc.UnaryServerInterceptor)
		trace bool
	}{
		{"bare/untraced", noInterceptors, false},
		{"stack/untraced", func() ([]grpc.UnaryClientInterceptor, []grpc.UnaryServerInterceptor) {
			return stackInterceptors(allLayers)
		}, false},
		{"floor/untraced", floorInterceptors(recordNone, false), false},
		{"floor-wire/untraced", floorInterceptors(recordNone, true), false},
		{"floor-all/untraced", floorAllInterceptors(recordNone), false},
		{"bare/traced", noInterceptors, true},
		{"stack/traced", func() ([]grpc.UnaryClientInterceptor, []grpc.UnaryServerInterceptor) {
			return stackInterceptors(allLayers)
		}, true},
		{"floor/traced", floorInterceptors(recordSpan, false), true},
		{"floor-wire/traced", floorInterceptors(recordSpan, true), true},
		{"floor-all/traced", floorAllInterceptors(recordSpan), true},
	} {
		b.Run(v.name, func(b *testing.B) {
			cis, sis := v.cis()
			call := inProcessCall(cis, sis)
			ctx := context.Background()
			if v.trace {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
				c, s := tp.Tracer("bench").Start(ctx, "handle")
				defer s.End()
				ctx = c
			}
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			b.ReportAllocs()
			for b.Loop() {
				if err := call(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func floorInterceptors(rec floorRecord, wire bool) func() ([]grpc.UnaryClientInterceptor, []grpc.UnaryServerInterceptor) {
	return func() ([]grpc.UnaryClientInterceptor, []grpc.UnaryServerInterceptor) {
		c := newFloorClient(rec)
		c.wire = wire
		return []grpc.UnaryClientInterceptor{c.intercept}, []grpc.UnaryServerInterceptor{floorServer}
	}
}

// layerInterceptors returns new interceptors of the layers l ([stackInterceptors]).
func layerInterceptors(l layers) func() ([]grpc.UnaryClientInterceptor, []grpc.UnaryServerInterceptor) {
	return func() ([]grpc.UnaryClientInterceptor, []grpc.UnaryServerInterceptor) { return stackInterceptors(l) }
}

// noInterceptors is the call of the harness alone, whose price the others include.
func noInterceptors() ([]grpc.UnaryClientInterceptor, []grpc.UnaryServerInterceptor) {
	return nil, nil
}

func floorAllInterceptors(rec floorRecord) func() ([]grpc.UnaryClientInterceptor, []grpc.UnaryServerInterceptor) {
	return func() ([]grpc.UnaryClientInterceptor, []grpc.UnaryServerInterceptor) {
		return []grpc.UnaryClientInterceptor{newFloorAllClient(rec).intercept}, []grpc.UnaryServerInterceptor{floorServerAll}
	}
}

// inProcessCall returns one call through the client chain cis and the server chain
// sis, joined in the process.
func inProcessCall(cis []grpc.UnaryClientInterceptor, sis []grpc.UnaryServerInterceptor) func(ctx context.Context) error {
	handler := func(ctx context.Context, req any) (any, error) { return &testgrpc.SimpleResponse{}, nil }
	server := chainServer(sis, handler)
	invoker := func(ctx context.Context, method string, req, reply any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
		sctx := context.Background() //deadlinevet:detached the server side of a call joined in the process starts afresh, as grpc-go's does; it gets the client's deadline below
		if dl, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			sctx, cancel = context.WithDeadline(sctx, dl)
			defer cancel()
		}
		if md, ok := metadata.FromOutgoingContext(ctx); ok {
			sctx = metadata.NewIncomingContext(sctx, md)
		}
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			sctx = trace.ContextWithSpan(sctx, span) // the server's span, as otelgrpc's would be
		}
		_, err := server(sctx, req)
		for _, o := range opts {
			if t, ok := o.(grpc.TrailerCallOption); ok {
				*t.TrailerAddr = metadata.MD{}
			}
		}
		return err
	}
	client := chainClient(cis, invoker)
	req, reply := &testgrpc.SimpleRequest{}, &testgrpc.SimpleResponse{}
	return func(ctx context.Context) error { return client(ctx, stackMethod, req, reply, nil) }
}

// chainServer joins sis as grpc-go's grpc.ChainUnaryInterceptor does, at the same
// price: on every call, one closure for each interceptor but the last, binding the
// rest of the chain to the call's handler.
func chainServer(sis []grpc.UnaryServerInterceptor, h grpc.UnaryHandler) grpc.UnaryHandler {
	if len(sis) == 0 {
		return h
	}
	info := &grpc.UnaryServerInfo{FullMethod: stackMethod}
	return func(ctx context.Context, req any) (any, error) {
		return sis[0](ctx, req, info, serverLink(sis, 0, info, h))
	}
}

// serverLink is the handler of sis[i] in a chain of chainServer's.
func serverLink(sis []grpc.UnaryServerInterceptor, i int, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) grpc.UnaryHandler {
	if i == len(sis)-1 {
		return h
	}
	return func(ctx context.Context, req any) (any, error) {
		return sis[i+1](ctx, req, info, serverLink(sis, i+1, info, h))
	}
}

// chainClient joins cis as grpc-go's grpc.WithChainUnaryInterceptor does, at the
// same price: on every call, one closure for each interceptor but the last,
// binding the rest of the chain to the call's invoker.
func chainClient(cis []grpc.UnaryClientInterceptor, inv grpc.UnaryInvoker) grpc.UnaryInvoker {
	if len(cis) == 0 {
		return inv
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		return cis[0](ctx, method, req, reply, cc, clientLink(cis, 0, inv), opts...)
	}
}

// clientLink is the invoker of cis[i] in a chain of chainClient's.
func clientLink(cis []grpc.UnaryClientInterceptor, i int, inv grpc.UnaryInvoker) grpc.UnaryInvoker {
	if i == len(cis)-1 {
		return inv
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		return cis[i+1](ctx, method, req, reply, cc, clientLink(cis, i+1, inv), opts...)
	}
}

// BenchmarkStackCodeCold is [BenchmarkStackCode] untraced with the caches cold: before
// each call the benchmark writes over 8 MiB, as a real call finds the caches after
// the network stack, the runtime and other requests have run since the last one,
// and it times each call alone. It reports each variant's median call ("call-ns");
// less the harness's ("bare"), it is what the interceptors cost when the code and
// data a call touches have to be fetched again, as over the network: [BenchmarkStack]'s loopback figures are two to three times
// [BenchmarkStackCode]'s warm ones, for the stack much more than for the floor. The
// "layers" variants add the stack's layers one at a time, to show whose footprint
// it is.
//
//	go test -run '^$' -bench StackCodeCold -benchtime 3000x -count 3 .
func BenchmarkStackCodeCold(b *testing.B) {
	evict := make([]byte, 8<<20)
	for _, v := range []struct {
		name string
		cis  func() ([]grpc.UnaryClientInterceptor, []grpc.UnaryServerInterceptor)
	}{
		{"bare", noInterceptors},
		{"stack", layerInterceptors(allLayers)},
		{"floor-all", floorAllInterceptors(recordNone)},
		// The layers one at a time, as [BenchmarkStackLayers] adds them.
		{"layers/propagate", layerInterceptors(layers{propagate: true})},
		{"layers/+shortcircuit", layerInterceptors(layers{propagate: true, shortcircuit: true})},
		{"layers/+retry", layerInterceptors(layers{propagate: true, shortcircuit: true, retry: true})},
		{"layers/hedge-only", layerInterceptors(layers{hedge: true})},
	} {
		b.Run(v.name, func(b *testing.B) {
			cis, sis := v.cis()
			call := inProcessCall(cis, sis)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for range 100 { // the window and the pools past their first calls
				if err := call(ctx); err != nil {
					b.Fatal(err)
				}
			}
			var took []time.Duration
			b.ReportAllocs()
			for b.Loop() {
				for i := 0; i < len(evict); i += 64 {
					evict[i]++
				}
				start := time.Now()
				if err := call(ctx); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2]), "call-ns")
		})
	}
}
