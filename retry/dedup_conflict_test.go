package retry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/retry"
)

// A server's deduplication answers a repeat that came while the first with its key
// still ran with 409 / ABORTED and the time to come back: the retry layer comes back
// after it, for keyed requests only, and only with a positive pushback.
func TestDedupConflictIsRetriedAfterItsPushback(t *testing.T) {
	for _, tc := range []struct {
		name     string
		key      bool
		header   map[string]string
		attempts int64
		status   int
	}{
		{"keyed, pushback ms", true, map[string]string{"Grpc-Retry-Pushback-Ms": "20"}, 2, 200},
		{"keyed, Retry-After", true, map[string]string{"Retry-After": "0"}, 1, 409},
		{"keyed, no pushback", true, nil, 1, 409},
		{"keyed, do not retry", true, map[string]string{"Grpc-Retry-Pushback-Ms": "-1"}, 1, 409},
		{"no key", false, map[string]string{"Grpc-Retry-Pushback-Ms": "20"}, 1, 409},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				if n.Add(1) == 1 {
					for k, v := range tc.header {
						w.Header().Set(k, v)
					}
					w.WriteHeader(http.StatusConflict)
					return
				}
				w.Header().Set("Idempotent-Replayed", "true")
			}))
			defer srv.Close()
			c := &http.Client{Transport: retry.NewTransport(nil)}
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
			if tc.key {
				req.Header.Set("Idempotency-Key", "k1")
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status || n.Load() != tc.attempts {
				t.Fatalf("status %d after %d attempts, want %d after %d", resp.StatusCode, n.Load(), tc.status, tc.attempts)
			}
		})
	}
}

func TestDedupAbortedIsRetriedAfterItsPushback(t *testing.T) {
	for _, tc := range []struct {
		name     string
		key      bool
		pushback string
		attempts int
		code     codes.Code
	}{
		{"keyed, pushback", true, "20", 2, codes.OK},
		{"keyed, no pushback", true, "", 1, codes.Aborted},
		{"keyed, do not retry", true, "-1", 1, codes.Aborted},
		{"no key", false, "20", 1, codes.Aborted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &testServer{fn: func(ctx context.Context, n int) error {
				if n == 1 {
					if tc.pushback != "" {
						grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", tc.pushback))
					}
					return status.Error(codes.Aborted, "the first with this key still runs")
				}
				return nil
			}}
			c := serveGRPC(t, s, nil, grpc.WithUnaryInterceptor(retry.UnaryClientInterceptor()))
			ctx := context.Background()
			if tc.key {
				ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", "k1")
			}
			_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
			if status.Code(err) != tc.code || s.calls() != tc.attempts {
				t.Fatalf("%v after %d attempts, want %v after %d", err, s.calls(), tc.code, tc.attempts)
			}
		})
	}
}
