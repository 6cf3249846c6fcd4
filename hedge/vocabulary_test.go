package hedge_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/attempts"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/retry"
)

// The seams' vocabulary, read by every layer the same way: these tests put hostile
// values through hedge and retry side by side.

// attemptsValues are grpc-previous-rpc-attempts values a caller may send; the
// spaces and the values above 1000 are where retry's and hedge's old parsers
// disagreed.
var attemptsValues = []string{
	"", "0", "1", "2", " 3 ", "\t4", "+1", "-1", "999", "1000", "1001", "9223372036854775807",
	"99999999999999999999", "many", "0x1", "1, 2", "１", "1\x00", strings.Repeat("9", 4096),
}

// TestVocabularyPreviousAttempts: retry's server side takes a request for a retry
// exactly when a hedge beneath it counts the upstream's attempts as at least one,
// over HTTP and gRPC; and each hedge sends the count plus its own, well formed.
func TestVocabularyPreviousAttempts(t *testing.T) {
	for _, v := range attemptsValues {
		n := attempts.Parse(v)
		want := attempts.Format(n + 1)

		// retry, server side, HTTP and gRPC.
		var serving bool
		h := retry.NewMiddleware()(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { serving = retry.ServingRetry(r.Context()) }))
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header[attempts.Header] = []string{v}
		h.ServeHTTP(httptest.NewRecorder(), r)
		if serving != (n > 0) {
			t.Errorf("%.20q: retry.NewMiddleware: ServingRetry %v; the count is %d", v, serving, n)
		}
		ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(attempts.Key, v))
		_, _ = retry.UnaryServerInterceptor()(ctx, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
			serving = retry.ServingRetry(ctx)
			return nil, nil
		})
		if serving != (n > 0) {
			t.Errorf("%.20q: retry.UnaryServerInterceptor: ServingRetry %v; the count is %d", v, serving, n)
		}

		// hedge, HTTP and gRPC: the hedge carries the count plus one.
		if got := hedgeHTTPAttempts(t, v); len(got) != 2 || got[0] != v || got[1] != want {
			t.Errorf("%.20q: hedge over HTTP sent %.40q; want the caller's value, then %q", v, got, want)
		}
		if got := hedgeGRPCAttempts(t, v); len(got) != 2 || got[0] != v || got[1] != want {
			t.Errorf("%.20q: hedge over gRPC sent %.40q; want the caller's value, then %q", v, got, want)
		}
	}
}

// hedgeHTTPAttempts sends a GET carrying grpc-previous-rpc-attempts v through a hedge
// whose primary is slow, and returns the value each copy carried.
func hedgeHTTPAttempts(t *testing.T, v string) (sent []string) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		rt := hedge.NewTransport(testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			sent = append(sent, strings.Join(r.Header.Values("Grpc-Previous-Rpc-Attempts"), ","))
			slow := len(sent) == 1
			mu.Unlock()
			if slow {
				if err := sleep(r.Context(), time.Second); err != nil {
					return nil, err
				}
			}
			return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("ok")), Header: http.Header{}, Request: r}, nil
		}), hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}))
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://backend.test/", nil)
		req.Header["Grpc-Previous-Rpc-Attempts"] = []string{v}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		synctest.Wait()
	})
	return sent
}

// hedgeGRPCAttempts is hedgeHTTPAttempts over gRPC.
func hedgeGRPCAttempts(t *testing.T, v string) (sent []string) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
			md, _ := metadata.FromOutgoingContext(ctx)
			mu.Lock()
			sent = append(sent, strings.Join(md.Get("grpc-previous-rpc-attempts"), ","))
			slow := len(sent) == 1
			mu.Unlock()
			if slow {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}
		ic := hedge.UnaryClientInterceptor(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}), hedge.WithIdempotentMethods(methodPost))
		ctx := metadata.AppendToOutgoingContext(t.Context(), "grpc-previous-rpc-attempts", v)
		if err := ic(ctx, methodPost, &wrapperspb.StringValue{}, &wrapperspb.StringValue{}, nil, invoker); err != nil {
			t.Fatal(err)
		}
	})
	return sent
}

// TestVocabularyIdempotency: hedge hedges what retry retries after it was sent, by
// method and by key, and no blank key counts.
func TestVocabularyIdempotency(t *testing.T) {
	for _, tc := range []struct {
		method string
		key    []string // Idempotency-Key values; nil for none
		want   bool
	}{
		{"", nil, true}, {"GET", nil, true}, {"HEAD", nil, true}, {"OPTIONS", nil, true}, {"TRACE", nil, true},
		{"PUT", nil, true}, {"DELETE", nil, true},
		{"POST", nil, false}, {"PATCH", nil, false}, {"CONNECT", nil, false}, {"get", nil, false},
		{"POST", []string{"k1"}, true},
		{"PATCH", []string{" k1 "}, true},
		{"POST", []string{""}, false},
		{"POST", []string{"   "}, false},
		{"POST", []string{"", "k2"}, false},
		{"POST", []string{"k1", ""}, true},
	} {
		req := httptest.NewRequest(http.MethodGet, "http://backend.test/", nil)
		req.Method = tc.method
		if tc.key != nil {
			req.Header["Idempotency-Key"] = tc.key
		}
		if got := hedgeable(req, hedge.WithKeyedWrites()); got != tc.want {
			t.Errorf("%s %q: hedgeable with WithKeyedWrites %v; want %v", tc.method, tc.key, got, tc.want)
		}
		// By default a keyed write is not hedged; what the method makes
		// idempotent is.
		if got, want := hedgeable(req), tc.want && idempotentMethod(tc.method); got != want {
			t.Errorf("%s %q: hedgeable by default %v; want %v", tc.method, tc.key, got, want)
		}
		if got := retriedAfterSent(t, req); got != tc.want {
			t.Errorf("%s %q: retry retried a 503: %v; want %v", tc.method, tc.key, got, tc.want)
		}
	}
}

// idempotentMethod reports whether m is a method hedge and retry take as
// idempotent whatever the request's key.
func idempotentMethod(m string) bool {
	return slices.Contains([]string{"", "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"}, m)
}

// hedgeable reports whether hedge's transport, made with opts, takes req as a call
// it may hedge.
func hedgeable(req *http.Request, opts ...hedge.Option) bool {
	h := hedge.New(opts...)
	if resp, err := h.Transport(&instant{}).RoundTrip(req); err == nil {
		resp.Body.Close()
	}
	return h.Stats().Primaries == 1
}

// retriedAfterSent reports whether retry's transport retries req after a 503.
func retriedAfterSent(t *testing.T, req *http.Request) (retried bool) {
	synctest.Test(t, func(t *testing.T) {
		n := 0
		rt := retry.NewTransport(testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			n++
			code := 503
			if n > 1 {
				code = 200
			}
			return &http.Response{StatusCode: code, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
		}), retry.WithBudget(nil))
		resp, err := rt.RoundTrip(req.WithContext(t.Context()))
		if err == nil {
			resp.Body.Close()
		}
		retried = n > 1
	})
	return retried
}

// TestVocabularyGRPCKey: a blank idempotency-key does not make a gRPC call
// hedgeable under WithKeyedWrites, a real one does.
func TestVocabularyGRPCKey(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want int // copies sent
	}{
		{"k1", 2}, {" k1 ", 2}, {"", 1}, {"  ", 1},
	} {
		synctest.Test(t, func(t *testing.T) {
			var mu sync.Mutex
			calls := 0
			invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
				mu.Lock()
				calls++
				slow := calls == 1
				mu.Unlock()
				if slow {
					return sleep(ctx, time.Second)
				}
				return nil
			}
			h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}), hedge.WithKeyedWrites())
			ctx := metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", tc.key)
			_ = h.UnaryClientInterceptor()(ctx, methodPost, &wrapperspb.StringValue{}, &wrapperspb.StringValue{}, nil, invoker)
			synctest.Wait()
			if calls != tc.want {
				t.Errorf("idempotency-key %q: %d copies; want %d", tc.key, calls, tc.want)
			}
		})
	}
}
