package retry_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/record"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/otelattr"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// Tests of the seams between retry and the layers around it: what each signal of
// another layer makes retry do, and the stop reason it records.

// traced runs fn as one traced outbound call (the test stands in for the layer that
// starts the call's span) and returns the stop reason and attempts recorded on the
// call's span.
func traced(t *testing.T, p record.Protocol, name string, fn func(ctx context.Context)) (stop string, attempts int64) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	ctx, handler := tp.Tracer("test").Start(context.Background(), "handler")
	cctx, call := record.StartCall(ctx, p, name)
	fn(cctx)
	call.End(nil)
	handler.End()
	for _, s := range rec.Ended() {
		a := testkit.Attrs(s)
		if v, ok := a[otelattr.RetryStopReasonKey]; ok {
			return v.AsString(), a[otelattr.AttemptsKey].AsInt64()
		}
	}
	t.Fatal("no span carries a stop reason")
	return "", 0
}

// hiddenDeadline is a context whose deadline the layer cannot see (a framework's own
// context type): it ends with DeadlineExceeded, but Deadline reports none.
type hiddenDeadline struct{ context.Context }

func (hiddenDeadline) Deadline() (time.Time, bool) { return time.Time{}, false }

// blockUntilDone is an attempt that hangs until its context ends.
func blockUntilDone(_ int, r *http.Request) (*http.Response, error) {
	<-r.Context().Done()
	return nil, r.Context().Err()
}

// Stop reasons say what happened, over HTTP. A stop after an answer returns the
// answer (kept in memory while the layer waited): the reason is the span's.
func TestHTTPStopReasons(t *testing.T) {
	cancelAt := func(d time.Duration) func(context.Context) (context.Context, func()) {
		return func(ctx context.Context) (context.Context, func()) {
			ctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(d, cancel)
			return ctx, cancel
		}
	}
	timeout := func(d time.Duration) func(context.Context) (context.Context, func()) {
		return func(ctx context.Context) (context.Context, func()) { return context.WithTimeout(ctx, d) }
	}
	hidden := func(d time.Duration) func(context.Context) (context.Context, func()) {
		return func(ctx context.Context) (context.Context, func()) {
			ctx, cancel := context.WithTimeout(ctx, d)
			return hiddenDeadline{ctx}, cancel
		}
	}
	for _, c := range []struct {
		name    string
		method  string
		body    io.Reader // without GetBody
		header  []string
		fn      func(int, *http.Request) (*http.Response, error)
		ctx     func(context.Context) (context.Context, func())
		reason  string
		wantErr error
	}{
		{name: "504 with pushback -1: refused", method: "GET", fn: always(504, "grpc-retry-pushback-ms", "-1"), reason: "refused"},
		{name: "504 with pushback -1 on a POST: refused", method: "POST", fn: always(504, "grpc-retry-pushback-ms", "-1"), reason: "refused"},
		{name: "503 with pushback -1: downstream retried", method: "GET", fn: always(503, "grpc-retry-pushback-ms", "-1"), reason: "downstream_retried"},
		{name: "Retry-After over the cap", method: "GET", fn: always(503, "Retry-After", "3600"), reason: "pushback_over_cap"},
		{name: "malformed Retry-After", method: "GET", fn: always(503, "Retry-After", "soon"), reason: "pushback"},
		{name: "canceled during the wait", method: "GET", fn: always(503, "Retry-After", "1"), ctx: cancelAt(500 * time.Millisecond), reason: "canceled"},
		{name: "deadline during the wait", method: "GET", fn: always(503, "Retry-After", "1"), ctx: hidden(500 * time.Millisecond), reason: "deadline"},
		{name: "canceled during an attempt", method: "GET", fn: blockUntilDone, ctx: cancelAt(10 * time.Millisecond), reason: "canceled", wantErr: context.Canceled},
		{name: "deadline during an attempt", method: "GET", fn: blockUntilDone, ctx: timeout(100 * time.Millisecond), reason: "deadline", wantErr: context.DeadlineExceeded},
		{name: "keyed POST without GetBody", method: "POST", body: io.MultiReader(strings.NewReader("order")), header: []string{"Idempotency-Key", "k1"}, fn: always(503), reason: "not_retryable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeRT{fn: c.fn}
				rt := retry.NewTransport(f, retry.WithBudget(nil))
				stop, attempts := traced(t, record.HTTP, c.method, func(ctx context.Context) {
					if c.ctx != nil {
						var cancel func()
						ctx, cancel = c.ctx(ctx)
						defer cancel()
					}
					req, _ := http.NewRequestWithContext(ctx, c.method, "http://svc/", c.body)
					for i := 0; i+1 < len(c.header); i += 2 {
						req.Header.Set(c.header[i], c.header[i+1])
					}
					resp, err := rt.RoundTrip(req)
					if resp != nil {
						resp.Body.Close()
					}
					if c.wantErr != nil && !matches(err, c.wantErr) {
						t.Errorf("err %v; want %v", err, c.wantErr)
					}
					if c.wantErr == nil && (err != nil || resp == nil) {
						t.Errorf("got %v, %v; want the response as is", resp, err)
					}
				})
				if stop != c.reason || attempts != 1 || f.attempts() != 1 {
					t.Errorf("stop reason %q after %d attempt(s) (%d sent); want %q after 1", stop, attempts, f.attempts(), c.reason)
				}
			})
		})
	}
}

// trailerInvoker answers every attempt with err and the trailer pushback (none when
// empty), as grpc-go hands a trailer to grpc.Trailer.
func trailerInvoker(err error, pushback string) grpc.UnaryInvoker {
	return func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
		for _, o := range opts {
			if tr, ok := o.(grpc.TrailerCallOption); ok && pushback != "" {
				*tr.TrailerAddr = metadata.Pairs("grpc-retry-pushback-ms", pushback)
			}
		}
		return err
	}
}

// countingInvoker counts the attempts that reach it.
type countingInvoker struct {
	n  atomic.Int32
	fn grpc.UnaryInvoker
}

func (c *countingInvoker) invoke(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
	c.n.Add(1)
	return c.fn(ctx, method, req, reply, cc, opts...)
}

func blockingInvoker(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
	<-ctx.Done()
	return status.FromContextError(ctx.Err()).Err()
}

// Stop reasons say what happened, over gRPC.
func TestGRPCStopReasons(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "busy")
	for _, c := range []struct {
		name    string
		invoker grpc.UnaryInvoker
		cancel  time.Duration // cancel the call after this long
		timeout time.Duration
		hidden  bool
		reason  string
		code    codes.Code
	}{
		{name: "DEADLINE_EXCEEDED with pushback -1: refused", invoker: trailerInvoker(status.Error(codes.DeadlineExceeded, "deadlinekit: 4ms left, floor 20ms"), "-1"), reason: "refused", code: codes.DeadlineExceeded},
		{name: "UNAVAILABLE with pushback -1: downstream retried", invoker: trailerInvoker(unavailable, "-1"), reason: "downstream_retried", code: codes.Unavailable},
		{name: "pushback over the cap", invoker: trailerInvoker(unavailable, "3600000"), reason: "pushback_over_cap", code: codes.Unavailable},
		{name: "malformed pushback", invoker: trailerInvoker(unavailable, "soon"), reason: "pushback", code: codes.Unavailable},
		{name: "canceled during the wait", invoker: trailerInvoker(unavailable, "1000"), cancel: 500 * time.Millisecond, reason: "canceled", code: codes.Canceled},
		{name: "deadline during the wait", invoker: trailerInvoker(unavailable, "1000"), timeout: 500 * time.Millisecond, hidden: true, reason: "deadline", code: codes.DeadlineExceeded},
		{name: "canceled during an attempt", invoker: blockingInvoker, cancel: 10 * time.Millisecond, reason: "canceled", code: codes.Canceled},
		{name: "deadline during an attempt", invoker: blockingInvoker, timeout: 100 * time.Millisecond, reason: "deadline", code: codes.DeadlineExceeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				inv := &countingInvoker{fn: c.invoker}
				interceptor := retry.UnaryClientInterceptor(idem, retry.WithBudget(nil))
				stop, attempts := traced(t, record.GRPC, "/svc/Get", func(ctx context.Context) {
					if c.cancel > 0 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithCancel(ctx)
						defer cancel()
						time.AfterFunc(c.cancel, cancel)
					}
					if c.timeout > 0 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, c.timeout)
						defer cancel()
					}
					if c.hidden {
						ctx = hiddenDeadline{ctx}
					}
					err := interceptor(ctx, "/svc/Get", nil, nil, nil, inv.invoke)
					if status.Code(err) != c.code {
						t.Errorf("err %v; want code %v", err, c.code)
					}
				})
				if stop != c.reason || attempts != 1 || inv.n.Load() != 1 {
					t.Errorf("stop reason %q after %d attempt(s) (%d sent); want %q after 1", stop, attempts, inv.n.Load(), c.reason)
				}
			})
		})
	}
}

// Bug 4: a guard's refusal is not retried. The refusing server sees one request, the
// call returns the refusal with its words, and the stop reason is refused.
func TestShortCircuitRefusalNotRetriedHTTP(t *testing.T) {
	var hits atomic.Int32
	guard := shortcircuit.NewMiddleware(shortcircuit.WithFloor(time.Second))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the handler ran below the floor")
	}))
	srv := httptest.NewServer(propagate.NewMiddleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		guard.ServeHTTP(w, r)
	})))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: retry.NewTransport(propagate.NewTransport(base), fast, retry.WithBudget(nil))}

	var code int
	var body string
	stop, _ := traced(t, record.HTTP, "GET", func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond) // far below the 1s floor
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("err %v; want the refusal's response", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		code, body = resp.StatusCode, string(b)
	})
	if n := hits.Load(); n != 1 {
		t.Errorf("the refusing server saw %d requests; want 1", n)
	}
	if code != http.StatusGatewayTimeout || !strings.Contains(body, "floor 1s") {
		t.Errorf("got %d %q; want the guard's 504 and its words", code, body)
	}
	if stop != "refused" {
		t.Errorf("stop reason %q; want refused", stop)
	}
}

// Bug 5: propagate's floor refusing an attempt before sending it is not a transport
// failure: nothing is retried, no token is spent, the stop reason is deadline, and
// the error is still the budget error.
func TestLocalRefusalNotRetried(t *testing.T) {
	t.Run("HTTP", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeRT{fn: always(200)}
			budget := retry.NewBudget(0, 1, 10*time.Second) // 10 tokens
			var events atomic.Int32
			rt := retry.NewTransport(propagate.NewTransport(f, propagate.WithFloor(time.Second)),
				retry.WithBudget(budget), retry.WithObserver(func(context.Context, retry.Event) { events.Add(1) }))
			stop, _ := traced(t, record.HTTP, "GET", func(ctx context.Context) {
				ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://svc/", nil)
				_, err := rt.RoundTrip(req)
				if !errors.Is(err, deadline.ErrInsufficientBudget) {
					t.Errorf("err %v; want the floor's budget error", err)
				}
			})
			if events.Load() != 1 || f.attempts() != 0 || budget.Balance() != 10 || stop != "deadline" {
				t.Errorf("%d attempts (%d on the wire), %v tokens left, stop reason %q; want 1, 0, 10, deadline",
					events.Load(), f.attempts(), budget.Balance(), stop)
			}
		})
	})
	t.Run("gRPC", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			wire := &countingInvoker{fn: trailerInvoker(nil, "")}
			floor := propagate.UnaryClientInterceptor(propagate.WithFloor(time.Second))
			below := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
				return floor(ctx, method, req, reply, cc, wire.invoke, opts...)
			}
			budget := retry.NewBudget(0, 1, 10*time.Second)
			var events atomic.Int32
			interceptor := retry.UnaryClientInterceptor(retry.WithBudget(budget), retry.WithAttemptTimeout(200*time.Millisecond),
				retry.WithIdempotentMethods("/svc/Get"), retry.WithObserver(func(context.Context, retry.Event) { events.Add(1) }))
			stop, _ := traced(t, record.GRPC, "/svc/Get", func(ctx context.Context) {
				ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				err := interceptor(ctx, "/svc/Get", nil, nil, nil, below)
				if status.Code(err) != codes.DeadlineExceeded || !errors.Is(err, deadline.ErrInsufficientBudget) {
					t.Errorf("err %v; want the floor's budget error, DEADLINE_EXCEEDED", err)
				}
			})
			if events.Load() != 1 || wire.n.Load() != 0 || budget.Balance() != 10 || stop != "deadline" {
				t.Errorf("%d attempts (%d on the wire), %v tokens left, stop reason %q; want 1, 0, 10, deadline",
					events.Load(), wire.n.Load(), budget.Balance(), stop)
			}
		})
	})
}

// Bug 11: a caller that cancels during the wait before a retry spends no token; a
// retry that is sent spends one.
func TestBudgetTokenOnlyForASentRetry(t *testing.T) {
	for _, canceled := range []bool{true, false} {
		want := 9.0
		if canceled {
			want = 10
		}
		t.Run("HTTP", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				budget := retry.NewBudget(0, 1, 10*time.Second)
				f := &fakeRT{fn: func(n int, _ *http.Request) (*http.Response, error) {
					if n == 1 {
						return httpStatus(503, "Retry-After", "1"), nil
					}
					return httpStatus(200), nil
				}}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if canceled {
					time.AfterFunc(500*time.Millisecond, cancel)
				}
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://svc/", nil)
				resp, _ := retry.NewTransport(f, retry.WithBudget(budget)).RoundTrip(req)
				if resp != nil {
					resp.Body.Close()
				}
				if got := budget.Balance(); got != want {
					t.Errorf("canceled %v: %v tokens left; want %v", canceled, got, want)
				}
			})
		})
		t.Run("gRPC", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				budget := retry.NewBudget(0, 1, 10*time.Second)
				var n atomic.Int32
				invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
					if n.Add(1) == 1 {
						return trailerInvoker(status.Error(codes.Unavailable, "busy"), "1000")(ctx, method, req, reply, cc, opts...)
					}
					return nil
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if canceled {
					time.AfterFunc(500*time.Millisecond, cancel)
				}
				_ = retry.UnaryClientInterceptor(idem, retry.WithBudget(budget))(ctx, "/svc/Get", nil, nil, nil, invoker)
				if got := budget.Balance(); got != want {
					t.Errorf("canceled %v: %v tokens left; want %v", canceled, got, want)
				}
			})
		})
	}
}

// stallBody is a response body whose server sent the header and then nothing: a Read
// blocks until the body is closed or the request's context ends, as net/http's does.
type stallBody struct {
	ctx  context.Context
	once sync.Once
	done chan struct{}
}

func (b *stallBody) Read([]byte) (int, error) {
	select {
	case <-b.done:
		return 0, errors.New("read on closed body")
	case <-b.ctx.Done():
		return 0, b.ctx.Err()
	}
}

func (b *stallBody) Close() error {
	b.once.Do(func() { close(b.done) })
	return nil
}

// Bug 12: a retried 503 whose body stalls costs the drain's bound, not the deadline:
// the retry is sent and answers.
func TestStalledRetriedBodyDoesNotEatTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{fn: func(n int, r *http.Request) (*http.Response, error) {
			if n == 1 {
				resp := httpStatus(503)
				resp.Body = &stallBody{ctx: r.Context(), done: make(chan struct{})}
				return resp, nil
			}
			return httpStatus(200), nil
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://svc/", nil)
		resp, err := retry.NewTransport(f, retry.WithBudget(nil), retry.WithRandom(func() float64 { return 0.5 })).RoundTrip(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("got %v, %v; want the retry's 200", resp, err)
		}
		resp.Body.Close()
		// Fake time: the drain's 100 ms bound, then the 20 ms backoff.
		if gap := f.times[1].Sub(f.times[0]); gap != 120*time.Millisecond {
			t.Errorf("the retry was sent %v after the 503; want 100ms of drain + 20ms of backoff", gap)
		}
	})
}

// A pushback of zero (a Retry-After date in the past, grpc-retry-pushback-ms: 0)
// waits the backoff, with its jitter, not nothing.
func TestZeroPushbackWaitsTheBackoff(t *testing.T) {
	half := retry.WithRandom(func() float64 { return 0.5 }) // DefaultBackoff's 20 ms exactly
	t.Run("HTTP", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeRT{fn: func(n int, _ *http.Request) (*http.Response, error) {
				if n == 1 {
					return httpStatus(503, "Retry-After", time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)), nil
				}
				return httpStatus(200), nil
			}}
			req, _ := http.NewRequest("GET", "http://svc/", nil)
			resp, err := retry.NewTransport(f, retry.WithBudget(nil), half).RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if gap := f.times[1].Sub(f.times[0]); gap != 20*time.Millisecond {
				t.Errorf("waited %v after a Retry-After in the past; want the backoff, 20ms", gap)
			}
		})
	})
	t.Run("gRPC", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var times []time.Time
			invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
				times = append(times, time.Now())
				if len(times) == 1 {
					return trailerInvoker(status.Error(codes.Unavailable, "busy"), "0")(ctx, method, req, reply, cc, opts...)
				}
				return nil
			}
			if err := retry.UnaryClientInterceptor(idem, retry.WithBudget(nil), half)(context.Background(), "/svc/Get", nil, nil, nil, invoker); err != nil {
				t.Fatal(err)
			}
			if gap := times[1].Sub(times[0]); gap != 20*time.Millisecond {
				t.Errorf("waited %v after grpc-retry-pushback-ms: 0; want the backoff, 20ms", gap)
			}
		})
	})
}

// Bug 12 on the wire: a 503 whose body stalls after its first bytes is given up on
// (its connection dropped), and the retry answers, long before the deadline.
func TestStalledRetriedBodyLoopback(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) > 1 {
			io.WriteString(w, "ok")
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "overloaded, and the rest never comes")
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // until the client drops the connection
	}))
	defer srv.Close()
	c := newClient(t, fast, retry.WithBudget(nil))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("err %v; want the retry's answer", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok" || hits.Load() != 2 {
		t.Fatalf("got %d %q after %d requests; want the retry's 200", resp.StatusCode, body, hits.Load())
	}
}
