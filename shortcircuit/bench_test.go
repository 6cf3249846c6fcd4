package shortcircuit_test

import (
	"context"
	"net/http"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// discard is a ResponseWriter that keeps nothing.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

var (
	noopHTTP  = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	noopUnary = func(context.Context, any) (any, error) { return nil, nil }
	unaryInfo = &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/UnaryCall"}
)

func budgetRequest(b *testing.B, budget time.Duration) *http.Request {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	b.Cleanup(cancel)
	r, _ := http.NewRequestWithContext(ctx, "GET", "http://example.test/items/1", nil)
	return r
}

func budgetCtx(b *testing.B, budget time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	b.Cleanup(cancel)
	return ctx
}

// BenchmarkGuardAdmit measures the admit path: a request with an hour left under a
// 20ms static floor. "baseline" is the bare handler; the guard's cost is the
// difference.
func BenchmarkGuardAdmit(b *testing.B) {
	static := []shortcircuit.Option{shortcircuit.WithFloor(20 * time.Millisecond)}
	counted := append(static, shortcircuit.WithObserver(new(shortcircuit.Counter).Observe))
	adaptive := append(static, shortcircuit.WithAdaptiveFloor(shortcircuit.DefaultAdaptive))

	httpCase := func(h http.Handler) func(*testing.B) {
		return func(b *testing.B) {
			r, w := budgetRequest(b, time.Hour), &discard{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, r)
			}
		}
	}
	b.Run("http/baseline", httpCase(noopHTTP))
	b.Run("http/static", httpCase(shortcircuit.NewMiddleware(static...)(noopHTTP)))
	b.Run("http/static+counter", httpCase(shortcircuit.NewMiddleware(counted...)(noopHTTP)))
	b.Run("http/adaptive", httpCase(shortcircuit.NewMiddleware(adaptive...)(noopHTTP)))

	unaryCase := func(icpt grpc.UnaryServerInterceptor) func(*testing.B) {
		return func(b *testing.B) {
			ctx := budgetCtx(b, time.Hour)
			b.ReportAllocs()
			for b.Loop() {
				if icpt == nil {
					noopUnary(ctx, nil)
				} else {
					icpt(ctx, nil, unaryInfo, noopUnary)
				}
			}
		}
	}
	b.Run("grpc/baseline", unaryCase(nil))
	b.Run("grpc/static", unaryCase(shortcircuit.UnaryServerInterceptor(static...)))
	b.Run("grpc/static+counter", unaryCase(shortcircuit.UnaryServerInterceptor(counted...)))
	b.Run("grpc/adaptive", unaryCase(shortcircuit.UnaryServerInterceptor(adaptive...)))

	b.Run("grpc-stream/static", func(b *testing.B) {
		icpt := shortcircuit.StreamServerInterceptor(static...)
		var ss grpc.ServerStream = fakeStream{budgetCtx(b, time.Hour)}
		info := &grpc.StreamServerInfo{FullMethod: "/s/S"}
		h := func(any, grpc.ServerStream) error { return nil }
		b.ReportAllocs()
		for b.Loop() {
			icpt(nil, ss, info, h)
		}
	})
}

// BenchmarkGuardReject measures a refusal: 1ms left under a 20ms floor, the 504 body
// or the gRPC status built and (for HTTP) written.
func BenchmarkGuardReject(b *testing.B) {
	opts := []shortcircuit.Option{shortcircuit.WithFloor(20 * time.Millisecond), shortcircuit.WithObserver(new(shortcircuit.Counter).Observe)}
	b.Run("http", func(b *testing.B) {
		h := shortcircuit.NewMiddleware(opts...)(noopHTTP)
		r, w := budgetRequest(b, time.Hour), &discard{}
		r = r.WithContext(budgetCtx(b, time.Millisecond))
		b.ReportAllocs()
		for b.Loop() {
			w.h = http.Header{}
			h.ServeHTTP(w, r)
		}
	})
	b.Run("grpc", func(b *testing.B) {
		icpt := shortcircuit.UnaryServerInterceptor(opts...)
		ctx := budgetCtx(b, time.Millisecond)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := icpt(ctx, nil, unaryInfo, noopUnary); err == nil {
				b.Fatal("admitted")
			}
		}
	})
}

// BenchmarkLimitAdmit measures the concurrency limit's admission of requests at the
// default level: "free" finds a slot free every time; "contended" runs the callers
// in parallel under a limit of 2, so that most wait in the queue (no deadline, no
// refusal) and pay for the queue's bookkeeping.
func BenchmarkLimitAdmit(b *testing.B) {
	b.Run("free", func(b *testing.B) {
		h := shortcircuit.NewMiddleware(shortcircuit.WithFloor(20*time.Millisecond), shortcircuit.WithMaxConcurrency(64))(noopHTTP)
		r, w := budgetRequest(b, time.Hour), &discard{h: http.Header{}}
		b.ReportAllocs()
		for b.Loop() {
			h.ServeHTTP(w, r)
		}
	})
	b.Run("contended", func(b *testing.B) {
		icpt := shortcircuit.UnaryServerInterceptor(shortcircuit.WithFloor(0), shortcircuit.WithMaxConcurrency(2),
			shortcircuit.WithQueue(1<<16, shortcircuit.FIFO))
		work := func(context.Context, any) (any, error) {
			for range 20 { // a little work, so that the slots are held long enough to queue
				runtime.Gosched()
			}
			return nil, nil
		}
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				if _, err := icpt(ctx, nil, unaryInfo, work); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
