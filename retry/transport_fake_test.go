package retry_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/retry"
)

// fakeRT is an in-memory base transport: attempt n (1-based) is answered by fn.
type fakeRT struct {
	mu     sync.Mutex
	reqs   []*http.Request
	times  []time.Time
	bodies []string
	closed atomic.Int64 // response bodies closed
	fn     func(n int, r *http.Request) (*http.Response, error)
}

func (f *fakeRT) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, r)
	f.times = append(f.times, time.Now())
	n := len(f.reqs)
	var body string
	if r.Body != nil {
		b, _ := io.ReadAll(r.Body)
		_ = r.Body.Close()
		body = string(b)
	}
	f.bodies = append(f.bodies, body)
	f.mu.Unlock()
	resp, err := f.fn(n, r)
	if tr := httptrace.ContextClientTrace(r.Context()); tr != nil && tr.WroteHeaders != nil && !errors.Is(err, syscall.ECONNREFUSED) {
		tr.WroteHeaders() // as net/http does once the request's header is written
	}
	if resp != nil {
		resp.Body = &closeCounter{ReadCloser: resp.Body, n: &f.closed}
		resp.Request = r
	}
	return resp, err
}

func (f *fakeRT) attempts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

type closeCounter struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *closeCounter) Close() error {
	c.n.Add(1)
	return c.ReadCloser.Close()
}

func httpStatus(code int, h ...string) *http.Response {
	r := &http.Response{StatusCode: code, Status: http.StatusText(code), Header: http.Header{}, Body: io.NopCloser(strings.NewReader("body of " + http.StatusText(code)))}
	for i := 0; i+1 < len(h); i += 2 {
		r.Header.Set(h[i], h[i+1])
	}
	return r
}

func always(code int, h ...string) func(int, *http.Request) (*http.Response, error) {
	return func(int, *http.Request) (*http.Response, error) { return httpStatus(code, h...), nil }
}

var errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

// seeded returns a concurrency-safe seeded uniform source and a copy of it for
// computing the expected sequence.
func seeded(seed uint64) (func() float64, *rand.Rand) {
	r := rand.New(rand.NewPCG(seed, seed))
	var mu sync.Mutex
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}, rand.New(rand.NewPCG(seed, seed))
}

// The waits between attempts follow DefaultBackoff with independently sampled jitter,
// reproducibly for a seeded source.
func TestBackoffSequenceSeeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, expect := seeded(42)
		f := &fakeRT{fn: always(503)}
		rt := retry.NewTransport(f, retry.WithMaxAttempts(5), retry.WithRandom(src), retry.WithBudget(nil))
		req, _ := http.NewRequest("GET", "http://svc/", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode != 503 {
			t.Fatalf("got %v, %v; want the last 503", resp, err)
		}
		resp.Body.Close()
		if f.attempts() != 5 {
			t.Fatalf("%d attempts; want 5", f.attempts())
		}
		ranges := [][2]time.Duration{{16, 24}, {32, 48}, {64, 96}, {128, 192}}
		var distinct = map[float64]bool{}
		for i := 1; i < 5; i++ {
			gap := f.times[i].Sub(f.times[i-1])
			u := expect.Float64()
			want := retry.DefaultBackoff.Delay(i, u)
			if gap != want {
				t.Errorf("wait %d = %v; want %v", i, gap, want)
			}
			lo, hi := ranges[i-1][0]*time.Millisecond, ranges[i-1][1]*time.Millisecond
			if gap < lo || gap > hi {
				t.Errorf("wait %d = %v; want in %v–%v", i, gap, lo, hi)
			}
			distinct[float64(gap)/float64(retry.DefaultBackoff.Delay(i, 0.5))] = true
			t.Logf("wait %d: %v", i, gap)
		}
		if len(distinct) < 3 {
			t.Errorf("jitter not sampled independently per wait: %v", distinct)
		}
		if got := f.closed.Load(); got != 5 {
			t.Errorf("%d response bodies closed; want 5 (4 drained by the layer + the caller's)", got)
		}
	})
}

// Before waiting, the layer stops when time left ≤ backoff + floor, and returns the
// last answer; the last event carries the deadline rule's StopError.
func TestDeadlineRule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{fn: func(int, *http.Request) (*http.Response, error) {
			<-time.After(30 * time.Millisecond)
			return httpStatus(503), nil
		}}
		var last retry.Event
		rt := retry.NewTransport(f, retry.WithMaxAttempts(5), retry.WithBudget(nil),
			retry.WithBackoff(retry.Backoff{Base: 20 * time.Millisecond, Max: time.Second}),
			retry.WithObserver(func(_ context.Context, e retry.Event) { last = e }))
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://svc/", nil)
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		// attempt 1: 0–30 ms, 70 left > 20+20: wait 20; attempt 2: 50–80 ms, 20 left ≤ 40+20: stop.
		if err != nil || resp == nil || resp.StatusCode != 503 {
			t.Fatalf("got %v, %v; want the last answer, 503", resp, err)
		}
		var de *retry.StopError
		if last.Action != retry.Stop || !errors.As(last.Err, &de) || !errors.Is(last.Err, context.DeadlineExceeded) {
			t.Fatalf("last event %+v; want a *StopError (the deadline rule) matching context.DeadlineExceeded", last)
		}
		if de.Attempts != 2 || de.Remaining != 20*time.Millisecond || de.Wait != 40*time.Millisecond || de.Floor != deadline.DefaultFloor {
			t.Fatalf("StopError = %+v", de)
		}
		var se *retry.StatusError
		if !errors.As(last.Err, &se) || se.StatusCode != 503 {
			t.Fatalf("err %v does not wrap the last failure (503)", last.Err)
		}
		if took := time.Since(start); took != 80*time.Millisecond {
			t.Fatalf("returned after %v; want 80ms (at once, no useless wait)", took)
		}
		if f.closed.Load() != 1 {
			t.Fatalf("%d bodies closed; want 1 (the retried one)", f.closed.Load())
		}
		resp.Body.Close()
		if f.closed.Load() != 2 {
			t.Fatalf("the returned body's Close did not reach the base's")
		}
		t.Logf("stop: %v", last.Err)
	})
}

// A wait ends at once when the context ends; the answer kept during the wait is
// returned, and without one (a transport failure) the stop error.
func TestWaitEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, fn := range []func(int, *http.Request) (*http.Response, error){
			always(503),
			func(int, *http.Request) (*http.Response, error) { return nil, errRefused },
		} {
			f := &fakeRT{fn: fn}
			rt := retry.NewTransport(f, retry.WithBudget(nil), retry.WithBackoff(retry.Backoff{Base: time.Second}))
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://svc/", nil)
			start := time.Now()
			resp, err := rt.RoundTrip(req)
			if resp != nil {
				if err != nil || resp.StatusCode != 503 {
					t.Fatalf("got %v, %v; want the kept 503", resp, err)
				}
				resp.Body.Close()
			} else if !errors.Is(err, context.Canceled) || !errors.As(err, new(*retry.StopError)) {
				t.Fatalf("err = %v; want context.Canceled", err)
			}
			if took := time.Since(start); took != 100*time.Millisecond {
				t.Fatalf("returned after %v; want 100ms", took)
			}
		}
	})
}

func TestPushbackHTTP(t *testing.T) {
	cases := []struct {
		name     string
		resp     func() *http.Response
		method   string
		timeout  time.Duration
		attempts int
		gap      time.Duration
		wantErr  error
	}{
		{"Retry-After seconds", func() *http.Response { return httpStatus(429, "Retry-After", "1") }, "POST", 5 * time.Second, 2, time.Second, nil},
		{"Retry-After date", func() *http.Response {
			return httpStatus(503, "Retry-After", time.Now().Add(2*time.Second).UTC().Format(http.TimeFormat))
		}, "GET", 5 * time.Second, 2, 2 * time.Second, nil},
		{"grpc-retry-pushback-ms on HTTP", func() *http.Response { return httpStatus(503, "grpc-retry-pushback-ms", "250") }, "GET", 5 * time.Second, 2, 250 * time.Millisecond, nil},
		{"Retry-After past the deadline", func() *http.Response { return httpStatus(429, "Retry-After", "3") }, "GET", 2 * time.Second, 1, 0, nil},
		{"Retry-After over the cap", func() *http.Response { return httpStatus(429, "Retry-After", "3600") }, "GET", 0, 1, 0, nil},
		{"negative pushback", func() *http.Response { return httpStatus(503, "grpc-retry-pushback-ms", "-1") }, "GET", 5 * time.Second, 1, 0, nil},
		{"malformed Retry-After", func() *http.Response { return httpStatus(429, "Retry-After", "soon") }, "GET", 5 * time.Second, 1, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeRT{fn: func(n int, _ *http.Request) (*http.Response, error) {
					if n == 1 {
						return c.resp(), nil
					}
					return httpStatus(200), nil
				}}
				rt := retry.NewTransport(f, retry.WithBudget(nil), retry.WithMaxPushback(time.Minute))
				ctx := context.Background()
				if c.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.timeout)
					defer cancel()
				}
				req, _ := http.NewRequestWithContext(ctx, c.method, "http://svc/", strings.NewReader("x"))
				start := time.Now()
				resp, err := rt.RoundTrip(req)
				if resp != nil {
					resp.Body.Close()
				}
				if f.attempts() != c.attempts {
					t.Fatalf("%d attempts; want %d (err %v)", f.attempts(), c.attempts, err)
				}
				if c.attempts == 2 {
					if gap := f.times[1].Sub(f.times[0]); gap != c.gap {
						t.Fatalf("waited %v; want %v", gap, c.gap)
					}
				}
				if c.wantErr != nil && !matches(err, c.wantErr) {
					t.Fatalf("err = %v; want %v", err, c.wantErr)
				}
				if c.wantErr != nil && time.Since(start) != 0 {
					t.Fatalf("stopped after %v; want at once", time.Since(start))
				}
				if c.wantErr == nil && c.attempts == 1 && (err != nil || resp == nil) {
					t.Fatalf("got %v, %v; want the response as is", resp, err)
				}
			})
		})
	}
}

// Attempts are shallow copies: the caller's request is never modified; bodies are
// replayed through GetBody; the idempotency key is generated once and identical on
// every attempt; attempts after the first carry grpc-previous-rpc-attempts.
func TestRequestNotModifiedBodyReplayedKeyStable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{fn: func(n int, _ *http.Request) (*http.Response, error) {
			if n < 3 {
				return httpStatus(503), nil
			}
			return httpStatus(201), nil
		}}
		var events []retry.Event
		rt := retry.NewTransport(f, retry.WithBudget(nil), retry.WithIdempotencyKeys(nil),
			retry.WithObserver(func(_ context.Context, e retry.Event) { events = append(events, e) }))
		req, _ := http.NewRequest("POST", "http://svc/orders", strings.NewReader(`{"sku":42}`))
		req.Header.Set("X-Custom", "v")
		origBody := req.Body
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode != 201 {
			t.Fatalf("got %v, %v", resp, err)
		}
		resp.Body.Close()
		if len(req.Header) != 1 || req.Header.Get("X-Custom") != "v" || req.Body != origBody {
			t.Fatalf("caller's request modified: %v", req.Header)
		}
		key := f.reqs[0].Header.Get("Idempotency-Key")
		if len(key) != 36 || key[14] != '4' {
			t.Fatalf("key %q is not a UUIDv4", key)
		}
		for i, r := range f.reqs {
			if r == req {
				t.Fatalf("attempt %d is the caller's request itself", i+1)
			}
			if got := r.Header.Get("Idempotency-Key"); got != key {
				t.Fatalf("attempt %d key %q; want %q", i+1, got, key)
			}
			want := ""
			if i > 0 {
				want = string(rune('0' + i))
			}
			if got := r.Header.Get("grpc-previous-rpc-attempts"); got != want {
				t.Fatalf("attempt %d grpc-previous-rpc-attempts %q; want %q", i+1, got, want)
			}
			if f.bodies[i] != `{"sku":42}` || r.Header.Get("X-Custom") != "v" {
				t.Fatalf("attempt %d body %q headers %v", i+1, f.bodies[i], r.Header)
			}
		}
		if len(events) != 3 || events[0].Action != retry.Retry || events[2].Action != retry.Return || events[2].Verdict != retry.Answered {
			t.Fatalf("events %+v", events)
		}
		// A second call gets a new key.
		req2, _ := http.NewRequest("POST", "http://svc/orders", strings.NewReader("x"))
		resp, _ = rt.RoundTrip(req2)
		resp.Body.Close()
		if f.reqs[3].Header.Get("Idempotency-Key") == key {
			t.Fatal("the key was reused across logical calls")
		}
		// A caller's key is kept.
		req3, _ := http.NewRequest("POST", "http://svc/orders", strings.NewReader("x"))
		req3.Header.Set("Idempotency-Key", "caller-key")
		f.fn = func(n int, _ *http.Request) (*http.Response, error) {
			if n == 5 {
				return httpStatus(503), nil
			}
			return httpStatus(200), nil
		}
		resp, _ = rt.RoundTrip(req3)
		resp.Body.Close()
		if f.reqs[4].Header.Get("Idempotency-Key") != "caller-key" || f.reqs[5].Header.Get("Idempotency-Key") != "caller-key" {
			t.Fatal("the caller's key was not kept on every attempt")
		}
	})
}

// A body without GetBody cannot be replayed: the request is sent once.
func TestBodyWithoutGetBodySentOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{fn: always(503)}
		rt := retry.NewTransport(f, retry.WithBudget(nil))
		req, _ := http.NewRequest("PUT", "http://svc/x", io.NopCloser(strings.NewReader("data")))
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode != 503 || f.attempts() != 1 {
			t.Fatalf("got %v, %v after %d attempts; want the 503 after 1", resp, err, f.attempts())
		}
		resp.Body.Close()
	})
}

func TestHTTPClassificationEndToEnd(t *testing.T) {
	readReset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	cases := []struct {
		method   string
		key      bool
		fail     func() (*http.Response, error)
		attempts int
	}{
		{"POST", false, func() (*http.Response, error) { return nil, errRefused }, 3},
		{"POST", false, func() (*http.Response, error) { return nil, readReset }, 1},
		{"POST", true, func() (*http.Response, error) { return nil, readReset }, 3},
		{"GET", false, func() (*http.Response, error) { return nil, readReset }, 3},
		{"PUT", false, func() (*http.Response, error) { return httpStatus(502), nil }, 3},
		{"DELETE", false, func() (*http.Response, error) { return httpStatus(504), nil }, 3},
		{"PATCH", false, func() (*http.Response, error) { return httpStatus(503), nil }, 1},
		{"PATCH", false, func() (*http.Response, error) { return httpStatus(429), nil }, 3},
		{"POST", false, func() (*http.Response, error) { return httpStatus(408), nil }, 3},
		{"POST", false, func() (*http.Response, error) { return httpStatus(425), nil }, 3},
		{"GET", false, func() (*http.Response, error) { return httpStatus(400), nil }, 1},
		{"GET", false, func() (*http.Response, error) { return httpStatus(401), nil }, 1},
		{"GET", false, func() (*http.Response, error) { return httpStatus(403), nil }, 1},
		{"GET", false, func() (*http.Response, error) { return httpStatus(404), nil }, 1},
		{"GET", false, func() (*http.Response, error) { return httpStatus(501), nil }, 1},
		{"GET", false, func() (*http.Response, error) { return nil, errors.New("unsupported protocol scheme") }, 1},
	}
	for _, c := range cases {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeRT{fn: func(int, *http.Request) (*http.Response, error) { return c.fail() }}
			rt := retry.NewTransport(f, retry.WithBudget(nil))
			req, _ := http.NewRequest(c.method, "http://svc/", strings.NewReader("b"))
			if c.key {
				req.Header.Set("Idempotency-Key", "k")
			}
			resp, err := rt.RoundTrip(req)
			if resp != nil {
				resp.Body.Close()
			}
			if f.attempts() != c.attempts {
				t.Errorf("%s key=%v: %d attempts (err %v); want %d", c.method, c.key, f.attempts(), err, c.attempts)
			}
		})
	}
}

// An empty budget stops: the answer is returned, the last event says why.
func TestBudgetExhaustedHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{fn: always(503)}
		b := retry.NewBudget(0, 1, 2*time.Second) // two retries in reserve
		rt := retry.NewTransport(f, retry.WithBudget(b))
		req, _ := http.NewRequest("GET", "http://svc/", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode != 503 || f.attempts() != 3 {
			t.Fatalf("first call: %v, %v, %d attempts", resp, err, f.attempts())
		}
		resp.Body.Close()
		var last retry.Event
		rt = retry.NewTransport(f, retry.WithBudget(b), retry.WithObserver(func(_ context.Context, e retry.Event) { last = e }))
		resp, err = rt.RoundTrip(req)
		if err != nil || resp.StatusCode != 503 || f.attempts() != 4 {
			t.Fatalf("second call: %v, %v, %d attempts; want the 503 after 1", resp, err, f.attempts())
		}
		resp.Body.Close()
		var se *retry.StatusError
		if !errors.Is(last.Err, retry.ErrBudgetExhausted) || !errors.As(last.Err, &se) || se.StatusCode != 503 || !strings.Contains(last.Err.Error(), "budget exhausted") {
			t.Fatalf("last event's error %q does not say why nor wrap the 503", last.Err)
		}
		t.Logf("stop: %v", last.Err)
	})
}

// Only one layer retries: a handler serving a retry attempt makes one attempt.
func TestServingRetryMakesOneAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{fn: always(503)}
		rt := retry.NewTransport(f, retry.WithBudget(nil))
		ctx := retry.WithServingRetry(context.Background())
		if !retry.ServingRetry(ctx) || retry.ServingRetry(context.Background()) {
			t.Fatal("ServingRetry")
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://svc/", nil)
		resp, _ := rt.RoundTrip(req)
		resp.Body.Close()
		if f.attempts() != 1 {
			t.Fatalf("%d attempts; want 1", f.attempts())
		}
	})
}

// A per-attempt timeout bounds each attempt; the response body stays readable until
// closed.
func TestAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{fn: func(n int, r *http.Request) (*http.Response, error) {
			if n == 1 {
				<-r.Context().Done()
				return nil, r.Context().Err()
			}
			if d, ok := r.Context().Deadline(); !ok || time.Until(d) > 100*time.Millisecond {
				t.Errorf("attempt %d deadline %v", n, d)
			}
			return httpStatus(200), nil
		}}
		rt := retry.NewTransport(f, retry.WithBudget(nil), retry.WithAttemptTimeout(100*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://svc/", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode != 200 || f.attempts() != 2 {
			t.Fatalf("got %v, %v after %d attempts", resp, err, f.attempts())
		}
		<-time.After(500 * time.Millisecond) // past the attempt's timeout, in the bubble's time
		if _, err := io.ReadAll(resp.Body); err != nil {
			t.Fatalf("body unreadable after the call returned: %v", err)
		}
		resp.Body.Close()
	})
}

// The classifier, the key generator and the random source run on the caller's
// goroutine: their panic is the caller's, and goes through the layer unchanged
// (issue 14, item 2), once the answer nobody gets is closed.
func TestPanickingCallbacksGoThrough(t *testing.T) {
	type boom struct{ name string }
	for _, tc := range []struct {
		name string
		opt  retry.Option
	}{
		{"classifier", retry.WithClassifier(func(retry.Event) retry.Verdict { panic(boom{"classifier"}) })},
		{"keys", retry.WithIdempotencyKeys(func() string { panic(boom{"keys"}) })},
		{"random", retry.WithRandom(func() float64 { panic(boom{"random"}) })},
	} {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeRT{fn: always(503)}
			rt := retry.NewTransport(f, retry.WithBudget(nil), retry.WithIdempotencyKeys(nil), tc.opt)
			req, _ := http.NewRequest("POST", "http://svc/", nil)
			got := func() (v any) {
				defer func() { v = recover() }()
				if resp, err := rt.RoundTrip(req); err == nil {
					resp.Body.Close()
				}
				return nil
			}()
			if got != (boom{tc.name}) {
				t.Fatalf("%s: recovered %#v; want the callback's panic", tc.name, got)
			}
			if sent, closed := f.attempts(), f.closed.Load(); int64(sent) != closed {
				t.Fatalf("%s: %d answers, %d bodies closed; want every answer closed", tc.name, sent, closed)
			}
		})
	}
	// The request's own GetBody, called on the caller's goroutine before a retry.
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{fn: always(503)}
		rt := retry.NewTransport(f, retry.WithBudget(nil))
		req, _ := http.NewRequest("PUT", "http://svc/", strings.NewReader("payload"))
		req.GetBody = func() (io.ReadCloser, error) { panic(boom{"getbody"}) }
		got := func() (v any) {
			defer func() { v = recover() }()
			if resp, err := rt.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
			return nil
		}()
		if got != (boom{"getbody"}) {
			t.Fatalf("GetBody: recovered %#v; want its panic", got)
		}
		if sent, closed := f.attempts(), f.closed.Load(); int64(sent) != closed {
			t.Fatalf("GetBody: %d answers, %d bodies closed; want every answer closed", sent, closed)
		}
	})
	// The gRPC interceptor's key generator too.
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	got := func() (v any) {
		defer func() { v = recover() }()
		_ = retry.UnaryClientInterceptor(retry.WithIdempotencyKeys(func() string { panic(boom{"keys"}) }))(
			context.Background(), "/svc/M", nil, nil, nil, invoker)
		return nil
	}()
	if got != (boom{"keys"}) {
		t.Fatalf("gRPC keys: recovered %#v; want the generator's panic", got)
	}
}

// errStopped in a table of wanted errors stands for any *retry.StopError.
var errStopped = errors.New("a *retry.StopError")

// matches reports whether err is want, or a stop when want is errStopped.
func matches(err, want error) bool {
	if want == errStopped {
		return errors.As(err, new(*retry.StopError))
	}
	return errors.Is(err, want)
}
