package propagate_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/propagate"
)

func okResponse(r *http.Request) *http.Response {
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("ok")), Request: r}
}

// trackedBody records whether it was closed.
type trackedBody struct {
	io.Reader
	closed bool
}

func (b *trackedBody) Close() error { b.closed = true; return nil }

func TestTransportSendsTimeLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sent *http.Request
		base := testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			sent = r
			return okResponse(r), nil
		})
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel()
		time.Sleep(50 * time.Millisecond)

		for _, tc := range []struct {
			name        string
			opts        []propagate.Option
			grpc, conn  string
			childBudget time.Duration
		}{
			{"default passes exactly the time left", nil, "200000u", "", 200 * time.Millisecond},
			{"reserve", []propagate.Option{propagate.WithReserve(20 * time.Millisecond)}, "180000u", "", 180 * time.Millisecond},
			{"fraction", []propagate.Option{propagate.WithReserveFraction(0.5)}, "100000u", "", 100 * time.Millisecond},
			{"cap", []propagate.Option{propagate.WithMaxPerHop(30 * time.Millisecond)}, "30000000n", "", 30 * time.Millisecond},
			{"connect header", []propagate.Option{propagate.WithConnectTimeoutHeader()}, "200000u", "200", 200 * time.Millisecond},
		} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://backend.test/x", nil)
			req.Header.Set("X-Caller", "kept")
			before := req.Header.Clone()
			resp, err := propagate.NewTransport(base, tc.opts...).RoundTrip(req)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if got := sent.Header.Get("Grpc-Timeout"); got != tc.grpc {
				t.Errorf("%s: grpc-timeout %q; want %q", tc.name, got, tc.grpc)
			}
			if got := sent.Header.Get("Connect-Timeout-Ms"); got != tc.conn {
				t.Errorf("%s: Connect-Timeout-Ms %q; want %q", tc.name, got, tc.conn)
			}
			if sent.Header.Get("X-Caller") != "kept" {
				t.Errorf("%s: the caller's headers were not sent", tc.name)
			}
			if left, _ := deadline.Remaining(sent.Context()); left != tc.childBudget {
				t.Errorf("%s: the call ran under %v; want %v", tc.name, left, tc.childBudget)
			}
			// The caller's request is untouched.
			if sent == req || !reflect.DeepEqual(req.Header, before) || req.Context() != ctx {
				t.Errorf("%s: the caller's request was modified: %v", tc.name, req.Header)
			}
			resp.Body.Close()
			if tc.childBudget < 200*time.Millisecond && sent.Context().Err() == nil {
				t.Errorf("%s: the derived context outlived the response body", tc.name)
			}
		}
	})
}

func TestTransportWithoutDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sent *http.Request
		base := testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) { sent = r; return okResponse(r), nil })
		req, _ := http.NewRequest(http.MethodGet, "http://backend.test/x", nil)
		resp, err := propagate.NewTransport(base).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if sent != req || sent.Header.Get("Grpc-Timeout") != "" {
			t.Errorf("a request without deadline was changed: %v", sent.Header)
		}
		resp, err = propagate.NewTransport(base, propagate.WithDefaultTimeout(2*time.Second)).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := sent.Header.Get("Grpc-Timeout"); got != "2000000u" {
			t.Errorf("default budget sent as %q; want 2000000u", got)
		}
	})
}

func TestTransportRefusesWithoutTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		called := false
		base := testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) { called = true; return okResponse(r), nil })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		for _, tc := range []struct {
			name  string
			sleep time.Duration
			opts  []propagate.Option
		}{
			{"below the floor", 0, []propagate.Option{propagate.WithFloor(15 * time.Millisecond)}},
			{"below the default floor", 9500 * time.Microsecond, nil}, // deadline.MinFloor, 1 ms
			{"reserve eats it all", 0, []propagate.Option{propagate.WithFloor(0), propagate.WithReserve(10 * time.Millisecond)}},
			{"expired", time.Millisecond, nil},
		} {
			time.Sleep(tc.sleep)
			body := &trackedBody{Reader: strings.NewReader("payload")}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://backend.test/x", body)
			_, err := propagate.NewTransport(base, tc.opts...).RoundTrip(req)
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, deadline.ErrInsufficientBudget) {
				t.Errorf("%s: err = %v; want one wrapping context.DeadlineExceeded", tc.name, err)
			}
			if called {
				t.Errorf("%s: the request was sent", tc.name)
			}
			if !body.closed {
				t.Errorf("%s: the request body was not closed", tc.name)
			}
		}
		// With a zero floor, the same 10 ms go out.
		ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel2()
		req, _ := http.NewRequestWithContext(ctx2, http.MethodGet, "http://backend.test/x", nil)
		if resp, err := propagate.NewTransport(base, propagate.WithFloor(0)).RoundTrip(req); err != nil || !called {
			t.Errorf("no floor, 10ms left: %v, sent %v; want sent", err, called)
		} else {
			resp.Body.Close()
		}
	})
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// seen is what a handler behind the middleware observed.
type seen struct {
	called bool
	left   time.Duration
	has    bool
	in     propagate.Inbound
}

func recordingHandler(s *seen) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.called = true
		s.left, s.has = deadline.Remaining(r.Context())
		s.in, _ = propagate.InboundFromContext(r.Context())
	})
}

func TestMiddleware(t *testing.T) {
	ms := time.Millisecond
	type hdr = map[string][]string
	for _, tc := range []struct {
		name    string
		opts    []propagate.Option
		headers hdr
		status  int
		left    time.Duration // 0: no deadline expected
		source  string
		clamped bool
		body    string
	}{
		{"grpc-timeout", nil, hdr{"Grpc-Timeout": {"250m"}}, 200, 250 * ms, "grpc-timeout", false, ""},
		{"connect", nil, hdr{"Connect-Timeout-Ms": {"120"}}, 200, 120 * ms, "connect-timeout-ms", false, ""},
		{"grpc-timeout wins over connect", nil, hdr{"Grpc-Timeout": {"80m"}, "Connect-Timeout-Ms": {"120"}}, 200, 80 * ms, "grpc-timeout", false, ""},
		{"envoy ignored unless trusted", nil, hdr{"X-Envoy-Expected-Rq-Timeout-Ms": {"70"}}, 200, deadline.DefaultBudget, "default", false, ""},
		{"envoy trusted", []propagate.Option{propagate.WithTrustEnvoy()}, hdr{"X-Envoy-Expected-Rq-Timeout-Ms": {"70"}}, 200, 70 * ms, "x-envoy-expected-rq-timeout-ms", false, ""},
		{"connect wins over envoy", []propagate.Option{propagate.WithTrustEnvoy()}, hdr{"Connect-Timeout-Ms": {"90"}, "X-Envoy-Expected-Rq-Timeout-Ms": {"70"}}, 200, 90 * ms, "connect-timeout-ms", false, ""},
		{"default", nil, nil, 200, deadline.DefaultBudget, "default", false, ""},
		{"custom default", []propagate.Option{propagate.WithDefaultTimeout(time.Second)}, nil, 200, time.Second, "default", false, ""},
		{"no default", []propagate.Option{propagate.WithDefaultTimeout(0)}, nil, 200, 0, "", false, ""},
		{"clamped", nil, hdr{"Grpc-Timeout": {"10H"}}, 200, propagate.DefaultMaxTimeout, "grpc-timeout", true, ""},
		{"custom clamp", []propagate.Option{propagate.WithMaxTimeout(time.Second)}, hdr{"Connect-Timeout-Ms": {"5000"}}, 200, time.Second, "connect-timeout-ms", true, ""},
		{"clamp off", []propagate.Option{propagate.WithMaxTimeout(0)}, hdr{"Grpc-Timeout": {"10H"}}, 200, 10 * time.Hour, "grpc-timeout", false, ""},
		{"malformed", nil, hdr{"Grpc-Timeout": {"1x"}}, 400, 0, "", false, "malformed Grpc-Timeout header"},
		{"malformed connect", nil, hdr{"Connect-Timeout-Ms": {"-1"}}, 400, 0, "", false, "malformed Connect-Timeout-Ms header"},
		{"repeated", nil, hdr{"Grpc-Timeout": {"1m", "1H"}}, 400, 0, "", false, "header repeated 2 times"},
		{"malformed ignored, next wins", []propagate.Option{propagate.WithIgnoreMalformed()}, hdr{"Grpc-Timeout": {"1x"}, "Connect-Timeout-Ms": {"40"}}, 200, 40 * ms, "connect-timeout-ms", false, ""},
		{"malformed ignored, default", []propagate.Option{propagate.WithIgnoreMalformed()}, hdr{"Grpc-Timeout": {"1x"}}, 200, deadline.DefaultBudget, "default", false, ""},
		{"arrives expired", nil, hdr{"Grpc-Timeout": {"0n"}}, 504, 0, "", false, "no time left"},
		{"arrives expired, connect", nil, hdr{"Connect-Timeout-Ms": {"0"}}, 504, 0, "", false, "no time left"},
	} {
		synctest.Test(t, func(t *testing.T) {
			var s seen
			h := propagate.NewMiddleware(tc.opts...)(recordingHandler(&s))
			r := httptest.NewRequest(http.MethodGet, "/work", nil)
			for k, v := range tc.headers {
				r.Header[k] = v
			}
			rec := serve(h, r)
			if rec.Code != tc.status {
				t.Fatalf("%s: status %d; want %d (%s)", tc.name, rec.Code, tc.status, rec.Body)
			}
			if tc.status != 200 {
				if s.called {
					t.Errorf("%s: the handler ran", tc.name)
				}
				if !strings.Contains(rec.Body.String(), tc.body) {
					t.Errorf("%s: body %q; want it to contain %q", tc.name, rec.Body, tc.body)
				}
				return
			}
			if !s.called {
				t.Fatalf("%s: the handler did not run", tc.name)
			}
			if tc.left == 0 {
				if s.has {
					t.Errorf("%s: handler got a deadline (%v)", tc.name, s.left)
				}
				return
			}
			if !s.has || s.left != tc.left {
				t.Errorf("%s: handler saw %v, %v; want %v", tc.name, s.left, s.has, tc.left)
			}
			want := propagate.Inbound{Budget: tc.left, Source: tc.source, Clamped: tc.clamped}
			if s.in != want {
				t.Errorf("%s: Inbound %+v; want %+v", tc.name, s.in, want)
			}
		})
	}
}

// The handler's context ends at the deadline the caller sent.
func TestMiddlewareCancelsAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var ended time.Duration
		h := propagate.NewMiddleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
			ended = time.Since(start)
		}))
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Grpc-Timeout", "50m")
		serve(h, r)
		if ended != 50*time.Millisecond {
			t.Fatalf("handler context ended after %v; want 50ms", ended)
		}
	})
}

func TestMiddlewareUntrustedCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s seen
		var forwarded http.Header
		inner := recordingHandler(&s)
		trustInternal := propagate.WithTrustHTTP(func(r *http.Request) bool { return r.Header.Get("X-Internal") == "yes" })
		h := propagate.NewMiddleware(trustInternal, propagate.WithTrustEnvoy())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			forwarded = r.Header
			inner.ServeHTTP(w, r)
		}))
		newReq := func(internal bool) *http.Request {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set("Grpc-Timeout", "10H")
			r.Header.Set("Connect-Timeout-Ms", "99")
			r.Header.Set("X-Envoy-Expected-Rq-Timeout-Ms", "77")
			r.Header.Set("Grpc-Previous-Rpc-Attempts", "2")
			if internal {
				r.Header.Set("X-Internal", "yes")
			}
			return r
		}
		outside := newReq(false)
		serve(h, outside)
		if s.in.Source != "default" || s.left != deadline.DefaultBudget {
			t.Errorf("untrusted caller: budget %v from %q; want the default", s.left, s.in.Source)
		}
		for _, k := range []string{"Grpc-Timeout", "Connect-Timeout-Ms", "X-Envoy-Expected-Rq-Timeout-Ms", "Grpc-Previous-Rpc-Attempts"} {
			if forwarded.Get(k) != "" {
				t.Errorf("untrusted caller: handler still sees %s", k)
			}
			if outside.Header.Get(k) == "" {
				t.Errorf("the server's own request lost %s (the middleware must strip a copy)", k)
			}
		}
		serve(h, newReq(true))
		if s.in.Source != "grpc-timeout" || !s.in.Clamped || forwarded.Get("Grpc-Previous-Rpc-Attempts") != "2" {
			t.Errorf("trusted caller: %+v, attempts header %q; want its clamped grpc-timeout and its headers", s.in, forwarded.Get("Grpc-Previous-Rpc-Attempts"))
		}
	})
}
