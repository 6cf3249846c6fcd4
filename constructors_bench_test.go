package deadlinekit_test

import (
	"testing"

	"google.golang.org/grpc"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/pairbench"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// handNested is the stack of [deadlinekit.ServerOptions] and [deadlinekit.DialOptions]
// with their defaults, nested by hand from the packages' adapters.
func handNested() ([]grpc.ServerOption, []grpc.DialOption) {
	floor, reserve := deadline.MinFloor, deadlinekit.DefaultReserve
	po := []propagate.Option{propagate.WithFloor(floor), propagate.WithReserve(reserve),
		propagate.WithMaxReserveFraction(deadlinekit.DefaultReserveFraction)}
	var so []shortcircuit.Option // the guard learns its floor
	server := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(propagate.UnaryServerInterceptor(po...), retry.UnaryServerInterceptor(), shortcircuit.UnaryServerInterceptor(so...)),
		grpc.ChainStreamInterceptor(propagate.StreamServerInterceptor(po...), shortcircuit.StreamServerInterceptor(so...)),
	}
	b := breaker.New()
	client := []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(
			retry.UnaryClientInterceptor(retry.WithFloor(floor+reserve), retry.WithIdempotentMethods(stackMethod)),
			b.UnaryClientInterceptor(),
			hedge.New(hedge.WithFloor(floor+reserve), hedge.WithIdempotentMethods(stackMethod)).UnaryClientInterceptor(),
			propagate.UnaryClientInterceptor(po...)),
		grpc.WithChainStreamInterceptor(b.StreamClientInterceptor(), propagate.StreamClientInterceptor(po...)),
	}
	return server, client
}

// BenchmarkConstructors pairs one loopback gRPC unary call through the stack built
// by deadlinekit.ServerOptions and DialOptions with the same call through the same
// layers nested by hand (pairbench: alternately, call by call), untraced and traced
// (otelgrpc on both sides, a recording SDK, inside a recording span). The
// constructors should cost nothing: they only assemble the chain.
//
//	go test -run '^$' -bench Constructors -benchtime 20000x -count 5 .
func BenchmarkConstructors(b *testing.B) {
	untracedAndTraced(b, func(b *testing.B, traced bool) {
		hs, hc := handNested()
		byHand := startCallWith(b, hs, hc, traced, 0)
		built := startCallWith(b, deadlinekit.ServerOptions(), deadlinekit.DialOptions(deadlinekit.WithIdempotentMethods(stackMethod)), traced, 0)
		b.ReportAllocs()
		pairbench.Run(b, byHand, built)
	})
}

// BenchmarkBreakerInStack pairs the stack of ServerOptions and DialOptions with the
// same stack without its breaker layer (pairbench), untraced and traced: what the
// breaker's closed path adds to a whole loopback gRPC call.
//
//	go test -run '^$' -bench BreakerInStack -benchtime 20000x -count 5 .
func BenchmarkBreakerInStack(b *testing.B) {
	untracedAndTraced(b, func(b *testing.B, traced bool) {
		idem := deadlinekit.WithIdempotentMethods(stackMethod)
		without := startCallWith(b, deadlinekit.ServerOptions(), deadlinekit.DialOptions(idem, deadlinekit.Without(deadlinekit.Breaker)), traced, 0)
		with := startCallWith(b, deadlinekit.ServerOptions(), deadlinekit.DialOptions(idem), traced, 0)
		b.ReportAllocs()
		pairbench.Run(b, without, with)
	})
}

// BenchmarkChainDefaults pairs (pairbench) one loopback gRPC unary call through the
// stack with today's defaults (the guard's learned floor, the chain rule's mark on
// the hedgeable call, a bounded reserve) against the same stack with the defaults
// of earlier versions (a static 20 ms floor, no chain rule, a fixed reserve),
// untraced and traced: what issue 21's defaults cost a call.
//
//	go test -run '^$' -bench ChainDefaults -benchtime 20000x -count 5 .
func BenchmarkChainDefaults(b *testing.B) {
	untracedAndTraced(b, func(b *testing.B, traced bool) {
		old := []deadlinekit.Option{deadlinekit.WithIdempotentMethods(stackMethod), deadlinekit.WithFloor(deadline.DefaultFloor),
			deadlinekit.WithHedge(hedge.WithoutChainRule()), deadlinekit.WithPropagate(propagate.WithMaxReserveFraction(0))}
		before := startCallWith(b, deadlinekit.ServerOptions(old...), deadlinekit.DialOptions(old...), traced, 0)
		after := startCallWith(b, deadlinekit.ServerOptions(), deadlinekit.DialOptions(deadlinekit.WithIdempotentMethods(stackMethod)), traced, 0)
		b.ReportAllocs()
		pairbench.Run(b, before, after)
	})
}
