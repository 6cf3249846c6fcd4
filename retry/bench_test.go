package retry_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/deadlinekit/deadlinekit/retry"
)

type okRT struct{ resp *http.Response }

func (o okRT) RoundTrip(*http.Request) (*http.Response, error) { return o.resp, nil }

// BenchmarkRetryNoRetry measures what the retry layer adds to a call whose first
// attempt succeeds, against in-memory downstreams (no network), so that only the
// layer is measured.
func BenchmarkRetryNoRetry(b *testing.B) {
	resp := &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("")), Header: http.Header{}}
	ctx, cancel := context.WithTimeout(context.Background(), 1<<40)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://svc/", nil)
	post, _ := http.NewRequestWithContext(ctx, "POST", "http://svc/", strings.NewReader("x"))

	httpCases := []struct {
		name string
		rt   http.RoundTripper
		req  *http.Request
	}{
		{"HTTP/bare", okRT{resp}, req},
		{"HTTP/GET", retry.NewTransport(okRT{resp}), req},
		{"HTTP/GET+attempt-timeout", retry.NewTransport(okRT{resp}, retry.WithAttemptTimeout(1<<40)), req},
		{"HTTP/POST", retry.NewTransport(okRT{resp}), post},
		{"HTTP/POST+keys", retry.NewTransport(okRT{resp}, retry.WithIdempotencyKeys(nil)), post},
	}
	for _, c := range httpCases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r, err := c.rt.RoundTrip(c.req)
				if err != nil {
					b.Fatal(err)
				}
				if r != resp {
					r.Body.Close()
				}
			}
		})
	}

	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	grpcCases := []struct {
		name string
		ic   grpc.UnaryClientInterceptor
	}{
		{"gRPC/bare", func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, o ...grpc.CallOption) error {
			return inv(ctx, m, req, reply, cc, o...)
		}},
		{"gRPC/unary", retry.UnaryClientInterceptor()},
		{"gRPC/unary+attempt-timeout", retry.UnaryClientInterceptor(retry.WithAttemptTimeout(1 << 40))},
	}
	for _, c := range grpcCases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.ic(ctx, "/svc/M", nil, nil, nil, invoker); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
