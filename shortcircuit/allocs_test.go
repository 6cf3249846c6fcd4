//go:build !race

package shortcircuit_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// TestAdmitAllocs holds the admit path to zero allocations (the race detector
// allocates on its own, hence the build tag). Timing lives in the benchmarks.
func TestAdmitAllocs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	r, _ := http.NewRequestWithContext(ctx, "GET", "http://example.test/items/1", nil)
	w := &discard{h: http.Header{}}
	var ss grpc.ServerStream = fakeStream{ctx}
	sinfo := &grpc.StreamServerInfo{FullMethod: "/s/S"}
	shandler := func(any, grpc.ServerStream) error { return nil }

	static := []shortcircuit.Option{shortcircuit.WithFloor(20 * time.Millisecond)}
	observed := append(static, shortcircuit.WithObserver(new(shortcircuit.Counter).Observe),
		shortcircuit.WithFloorFunc(func(string) time.Duration { return time.Millisecond }))
	adaptive := append(observed, shortcircuit.WithAdaptiveFloor(shortcircuit.DefaultAdaptive))

	for name, opts := range map[string][]shortcircuit.Option{"static": static, "observed": observed} {
		h := shortcircuit.NewMiddleware(opts...)(noopHTTP)
		if n := testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, r) }); n != 0 {
			t.Errorf("HTTP %s: %v allocs per admitted request; want 0", name, n)
		}
		u := shortcircuit.UnaryServerInterceptor(opts...)
		if n := testing.AllocsPerRun(1000, func() { u(ctx, nil, unaryInfo, noopUnary) }); n != 0 {
			t.Errorf("gRPC unary %s: %v allocs per admitted call; want 0", name, n)
		}
		s := shortcircuit.StreamServerInterceptor(opts...)
		if n := testing.AllocsPerRun(1000, func() { s(nil, ss, sinfo, shandler) }); n != 0 {
			t.Errorf("gRPC stream %s: %v allocs per admitted stream; want 0", name, n)
		}
	}
	// The adaptive floor needs no allocation for gRPC once a route's bucket is in use.
	u := shortcircuit.UnaryServerInterceptor(adaptive...)
	u(ctx, nil, unaryInfo, noopUnary)
	if n := testing.AllocsPerRun(1000, func() { u(ctx, nil, unaryInfo, noopUnary) }); n != 0 {
		t.Errorf("gRPC unary adaptive: %v allocs per admitted call; want 0", n)
	}
}
