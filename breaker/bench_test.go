package breaker

import (
	"context"
	"net/http"
	"testing"

	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkClosed is the closed path's cost per call: the core with the defaults
// (the adaptive throttle on) and without the throttle, then each adapter (defaults)
// with a base that does nothing.
func BenchmarkClosed(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, v := range []struct {
		name string
		opts []Option
	}{{"core", nil}, {"core-nothrottle", []Option{WithoutAdaptiveThrottling()}}} {
		b.Run(v.name, func(b *testing.B) {
			br := New(v.opts...)
			c := br.circuit(key{kind: keyGRPC, b: "dns:///svc:50051"})
			b.ReportAllocs()
			for b.Loop() {
				var t ticket
				if err := br.admit(ctx, c, &t); err != nil {
					b.Fatal(err)
				}
				br.done(ctx, &t, &Result{GRPC: true})
			}
		})
	}
	// The same, from every P at once: the throttle's counters are shared by a circuit's callers.
	for _, v := range []struct {
		name string
		opts []Option
	}{{"core-parallel", nil}, {"core-nothrottle-parallel", []Option{WithoutAdaptiveThrottling()}}} {
		b.Run(v.name, func(b *testing.B) {
			br := New(v.opts...)
			c := br.circuit(key{kind: keyGRPC, b: "dns:///svc:50051"})
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					var t ticket
					if err := br.admit(ctx, c, &t); err != nil {
						b.Error(err)
						return
					}
					br.done(ctx, &t, &Result{GRPC: true})
				}
			})
		})
	}
	b.Run("http", func(b *testing.B) {
		resp := &http.Response{StatusCode: 200, Body: http.NoBody}
		rt := New().Transport(testkit.RoundTripFunc(func(*http.Request) (*http.Response, error) { return resp, nil }))
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://example.com/x", nil)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := rt.RoundTrip(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("grpc", func(b *testing.B) {
		in := New().UnaryClientInterceptor()
		cc, err := grpc.NewClient("passthrough:///svc", grpc.WithTransportCredentials(insecureCreds()))
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Close()
		noop := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
		b.ReportAllocs()
		for b.Loop() {
			if err := in(ctx, "/pkg.Svc/M", nil, nil, cc, noop); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }
