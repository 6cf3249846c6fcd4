package shortcircuit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const ms = time.Millisecond

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []shortcircuit.Event
}

func (r *recorder) Observe(_ context.Context, e shortcircuit.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) last(t *testing.T) shortcircuit.Event {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 {
		t.Fatal("no event observed")
	}
	return r.events[len(r.events)-1]
}

// serve runs h behind the middleware on a request whose context has the given budget
// (no deadline when budget is 0, a passed deadline when negative).
// spend is d of work or waiting in a synctest bubble's fake time: the bubble's clock
// jumps once every goroutine in it is blocked, and no wall-clock time passes. Outside
// a bubble synctest.Wait panics, so a test cannot use it to sleep on the wall clock.
func spend(d time.Duration) {
	synctest.Wait()
	<-time.After(d)
}

func serve(h http.Handler, target string, budget time.Duration) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", target, nil)
	if budget != 0 {
		ctx, cancel := context.WithTimeout(r.Context(), budget)
		defer cancel()
		r = r.WithContext(ctx)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestStaticFloorHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ran int
		var rec recorder
		h := shortcircuit.NewMiddleware(shortcircuit.WithFloor(20*ms), shortcircuit.WithObserver(rec.Observe))(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran++ }))

		for _, tc := range []struct {
			name   string
			budget time.Duration
			code   int
			body   string
			ran    bool
		}{
			{"no deadline", 0, 200, "", true},
			{"above the floor", time.Second, 200, "", true},
			{"exactly the floor", 20 * ms, 200, "", true},
			{"below the floor", 5 * ms, 504, "shortcircuit: 5ms left, floor 20ms: request refused before the handler ran\n", false},
			{"just below", 19*ms + 987*time.Microsecond, 504, "shortcircuit: 20ms left, floor 20ms: request refused before the handler ran\n", false},
			{"sub-millisecond", 420 * time.Microsecond, 504, "shortcircuit: 420µs left, floor 20ms: request refused before the handler ran\n", false},
		} {
			before := ran
			w := serve(h, "/x", tc.budget)
			if w.Code != tc.code || w.Body.String() != tc.body || (ran > before) != tc.ran {
				t.Errorf("%s: %d %q, handler ran %v; want %d %q, %v", tc.name, w.Code, w.Body, ran > before, tc.code, tc.body, tc.ran)
			}
			e := rec.last(t)
			if e.Admission.Refused() == tc.ran || e.Route != "/x" || e.HasDeadline != (tc.budget != 0) {
				t.Errorf("%s: event %+v", tc.name, e)
			}
			if e.HasDeadline && (e.Remaining != tc.budget || e.Floor != 20*ms) {
				t.Errorf("%s: event remaining %v floor %v; want %v, 20ms", tc.name, e.Remaining, e.Floor, tc.budget)
			}
		}

		// Already past the deadline: refused whatever the floor, even with none.
		bare := shortcircuit.NewMiddleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran++ }))
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-3*ms))
		defer cancel()
		r := httptest.NewRequest("GET", "/x", nil).WithContext(ctx)
		w := httptest.NewRecorder()
		before := ran
		bare.ServeHTTP(w, r)
		want := "shortcircuit: deadline passed 3ms ago: request refused before the handler ran\n"
		if w.Code != 504 || w.Body.String() != want || ran != before {
			t.Fatalf("expired: %d %q; want 504 %q and no handler", w.Code, w.Body, want)
		}
		// With no option, a route that has not learned its handler's time yet has
		// the floor deadline.MinFloor; with a zero floor, a request with any time
		// left runs.
		if w := serve(bare, "/x", deadline.MinFloor-time.Nanosecond); w.Code != 504 {
			t.Fatalf("default floor, %v left: %d; want 504", deadline.MinFloor-time.Nanosecond, w.Code)
		}
		if w := serve(bare, "/x", deadline.MinFloor); w.Code != 200 {
			t.Fatalf("default floor, %v left: %d; want 200", deadline.MinFloor, w.Code)
		}
		none := shortcircuit.NewMiddleware(shortcircuit.WithFloor(0))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		if w := serve(none, "/x", time.Nanosecond); w.Code != 200 {
			t.Fatalf("no floor, 1ns left: %d; want 200", w.Code)
		}
	})
}

func TestFloorFuncHTTPPattern(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen []string
		floors := map[string]time.Duration{"GET /slow/{id}": 100 * ms}
		mw := shortcircuit.NewMiddleware(
			shortcircuit.WithFloor(10*ms),
			shortcircuit.WithFloorFunc(func(route string) time.Duration {
				seen = append(seen, route)
				return floors[route]
			}))
		ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
		mux := http.NewServeMux()
		mux.Handle("GET /slow/{id}", mw(ok))
		mux.Handle("GET /fast", mw(ok))

		if w := serve(mux, "/slow/7", 50*ms); w.Code != 504 || !strings.Contains(w.Body.String(), "50ms left, floor 100ms") {
			t.Errorf("slow route, 50ms left: %d %q; want 504 with floor 100ms", w.Code, w.Body)
		}
		if w := serve(mux, "/fast", 50*ms); w.Code != 200 {
			t.Errorf("fast route, 50ms left: %d; want 200", w.Code)
		}
		// The static floor still holds where the function gives less.
		if w := serve(mux, "/fast", 5*ms); w.Code != 504 || !strings.Contains(w.Body.String(), "floor 10ms") {
			t.Errorf("fast route, 5ms left: %d %q; want 504 with floor 10ms", w.Code, w.Body)
		}
		// Outside a ServeMux the key is the path.
		serve(mw(ok), "/plain/path?q=1", time.Second)
		want := []string{"GET /slow/{id}", "GET /fast", "GET /fast", "/plain/path"}
		if strings.Join(seen, ",") != strings.Join(want, ",") {
			t.Fatalf("route keys %q; want %q", seen, want)
		}
		// No deadline: the floor function is not even asked.
		serve(mw(ok), "/none", 0)
		if len(seen) != len(want) {
			t.Fatalf("floor function called for a request without deadline")
		}
	})
}

// unary calls the interceptor directly with a handler that takes work (fake time) and
// fails when fail is set. budget 0 means no deadline.
func unary(icpt grpc.UnaryServerInterceptor, method string, budget, work time.Duration, fail bool) (ran bool, err error) {
	ctx := context.Background()
	if budget != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, budget)
		defer cancel()
	}
	_, err = icpt(ctx, "req", &grpc.UnaryServerInfo{FullMethod: method}, func(ctx context.Context, req any) (any, error) {
		ran = true
		spend(work)
		if fail {
			return nil, status.Error(codes.Internal, "boom")
		}
		return "resp", nil
	})
	return ran, err
}

func TestStaticFloorGRPC(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c shortcircuit.Counter
		icpt := shortcircuit.UnaryServerInterceptor(shortcircuit.WithFloor(20*ms), shortcircuit.WithObserver(c.Observe))
		ran, err := unary(icpt, "/svc/M", 5*ms, 0, false)
		if ran || status.Code(err) != codes.DeadlineExceeded ||
			status.Convert(err).Message() != "shortcircuit: 5ms left, floor 20ms: request refused before the handler ran" {
			t.Fatalf("5ms left: ran %v, err %v", ran, err)
		}
		if ran, err := unary(icpt, "/svc/M", 30*ms, 10*ms, false); !ran || err != nil {
			t.Fatalf("30ms left: ran %v, err %v", ran, err)
		}
		if ran, err := unary(icpt, "/svc/M", 0, 10*ms, false); !ran || err != nil {
			t.Fatalf("no deadline: ran %v, err %v", ran, err)
		}
		if ran, err := unary(icpt, "/svc/M", -time.Second, 0, false); ran || status.Code(err) != codes.DeadlineExceeded ||
			!strings.Contains(err.Error(), "deadline passed 1s ago") {
			t.Fatalf("expired: ran %v, err %v", ran, err)
		}
		// 30ms left, 50ms of work: 20ms past the deadline.
		unary(icpt, "/svc/M", 30*ms, 50*ms, false)
		unary(icpt, "/svc/M", 30*ms, 40*ms, false)
		want := shortcircuit.Stats{Admitted: 4, BelowFloor: 1, Expired: 1, Overruns: 2, Overrun: 30 * ms, MaxOverrun: 20 * ms}
		if got := c.Stats(); got != want || got.Refused() != 2 {
			t.Fatalf("stats %+v; want %+v", got, want)
		}
	})
}

func TestOverrunEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder
		h := shortcircuit.NewMiddleware(shortcircuit.WithFloor(0), shortcircuit.WithObserver(rec.Observe))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			spend(30 * ms)
		}))
		serve(h, "/work", 10*ms)
		e := rec.last(t)
		want := shortcircuit.Event{Route: "/work", Admission: shortcircuit.Admitted, HasDeadline: true,
			Remaining: 10 * ms, Duration: 30 * ms, Overrun: 20 * ms, Success: true}
		if e != want {
			t.Fatalf("event %+v; want %+v", e, want)
		}
		serve(h, "/work", 0)
		if e := rec.last(t); e.HasDeadline || e.Overrun != 0 || e.Duration != 30*ms {
			t.Fatalf("no deadline: event %+v", e)
		}
	})
}

// floorOf returns the floor the guard applies to method now, as seen by a probe call
// with plenty of budget and no work (it teaches the window a zero duration only when
// it succeeds, so the probe fails on purpose).
func floorOf(t *testing.T, icpt grpc.UnaryServerInterceptor, rec *recorder, method string) time.Duration {
	t.Helper()
	unary(icpt, method, time.Hour, 0, true)
	return rec.last(t).Floor
}

// near reports whether got is the floor learned from durations of want: the low
// edge of want's bin in the window, up to a sixteenth below it, never above.
func near(got, want time.Duration) bool {
	return got <= want && float64(want-got) <= float64(want)/16
}

func TestAdaptiveWarmUpRiseFall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder
		icpt := shortcircuit.UnaryServerInterceptor(shortcircuit.WithFloor(0),
			shortcircuit.WithAdaptiveFloor(shortcircuit.Adaptive{Quantile: 0.5, MinSamples: 10, Window: 10 * time.Second, Buckets: 10}),
			shortcircuit.WithObserver(rec.Observe))
		const m = "/svc/Adaptive"

		// Warm-up: no adaptive floor until 10 successful durations are known.
		for i := range 9 {
			if ran, err := unary(icpt, m, 5*ms, 0, false); !ran || err != nil {
				t.Fatalf("warm-up call %d refused: %v", i, err)
			}
			unary(icpt, m, time.Hour, 20*ms, false)
		}
		if f := floorOf(t, icpt, &rec, m); f != 0 {
			t.Fatalf("after 9 samples floor %v; want none", f)
		}
		unary(icpt, m, time.Hour, 20*ms, false) // the 10th
		if f := floorOf(t, icpt, &rec, m); !near(f, 20*ms) {
			t.Fatalf("after 10 samples of 20ms floor %v; want ≈20ms", f)
		}
		// The median of 9 zeros and 10 × 20ms is 20ms: a call with 5ms left is refused.
		if ran, err := unary(icpt, m, 5*ms, 0, false); ran || status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("5ms left after warm-up: ran %v err %v; want refused", ran, err)
		}
		// Failures teach nothing.
		for range 50 {
			unary(icpt, m, time.Hour, 50*ms, true) // 2.5s in all: the window still holds the successes
		}
		if f := floorOf(t, icpt, &rec, m); !near(f, 20*ms) {
			t.Fatalf("after failures floor %v; want ≈20ms", f)
		}

		// Rise: start afresh so the counts are exact, 40 fast calls, then slow ones.
		spend(time.Minute)
		for range 40 {
			unary(icpt, m, time.Hour, 10*ms, false) // 400ms in all, one bucket
		}
		slow := 0
		for ; slow < 100; slow++ {
			if f := floorOf(t, icpt, &rec, m); near(f, 100*ms) {
				break
			} else if !near(f, 10*ms) {
				t.Fatalf("floor %v after %d slow calls; want 10ms or 100ms", f, slow)
			}
			unary(icpt, m, time.Hour, 100*ms, false)
		}
		// The median turns once slow calls outnumber the fast ones: the 41st.
		if slow != 41 {
			t.Fatalf("floor rose after %d slow calls; want 41", slow)
		}

		// Fall: the handler gets fast again (10ms). About 41 slow durations are
		// in the window; the floor falls once the fast ones outnumber them, well within
		// one window.
		start := time.Now()
		for floorOf(t, icpt, &rec, m) > 50*ms {
			if time.Since(start) > 10*time.Second {
				t.Fatal("floor did not fall within a window")
			}
			unary(icpt, m, time.Hour, 10*ms, false)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("floor took %v to fall; want under 1s at 100 calls/s", took)
		}
		if f := floorOf(t, icpt, &rec, m); !near(f, 10*ms) {
			t.Fatalf("floor after the fall %v; want ≈10ms", f)
		}
	})
}

func TestAdaptiveBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder
		icpt := shortcircuit.UnaryServerInterceptor(
			shortcircuit.WithAdaptiveFloor(shortcircuit.Adaptive{MinSamples: 3, Min: 5 * ms, Max: time.Second}),
			shortcircuit.WithFloor(time.Millisecond),
			shortcircuit.WithObserver(rec.Observe))
		for range 3 {
			unary(icpt, "/fast", time.Hour, time.Millisecond, false)
			unary(icpt, "/slow", time.Hour, 3*time.Second, false)
		}
		if f := floorOf(t, icpt, &rec, "/fast"); f != 5*ms {
			t.Fatalf("1ms handler: floor %v; want Min 5ms", f)
		}
		if f := floorOf(t, icpt, &rec, "/slow"); f != time.Second {
			t.Fatalf("3s handler: floor %v; want Max 1s", f)
		}
		if ran, _ := unary(icpt, "/slow", 1500*ms, 0, true); !ran {
			t.Fatal("1.5s left on a 3s route with Max 1s: refused")
		}
		// The static floor applies to a route not yet learned.
		if f := floorOf(t, icpt, &rec, "/new"); f != time.Millisecond {
			t.Fatalf("unlearned route: floor %v; want the static 1ms", f)
		}
	})
}

// TestAdaptiveSelfHeal: a floor that refuses every request learns nothing new; once
// its window empties the route loses its adaptive floor instead of staying locked.
func TestAdaptiveSelfHeal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		icpt := shortcircuit.UnaryServerInterceptor(shortcircuit.WithAdaptiveFloor(shortcircuit.Adaptive{MinSamples: 5}))
		for range 5 {
			unary(icpt, "/m", 0, 100*ms, false)
		}
		if ran, _ := unary(icpt, "/m", 50*ms, 0, false); ran {
			t.Fatal("50ms left below a learned 100ms floor: admitted")
		}
		spend(shortcircuit.DefaultAdaptive.Window)
		if ran, _ := unary(icpt, "/m", 50*ms, 0, false); !ran {
			t.Fatal("after an empty window the route is still locked")
		}
	})
}

func TestAdaptiveMaxRoutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		icpt := shortcircuit.UnaryServerInterceptor(shortcircuit.WithAdaptiveFloor(shortcircuit.Adaptive{MinSamples: 1, MaxRoutes: 1}))
		unary(icpt, "/first", 0, 100*ms, false)
		unary(icpt, "/second", 0, 100*ms, false)
		if ran, _ := unary(icpt, "/first", 50*ms, 0, false); ran {
			t.Fatal("first route not learned")
		}
		if ran, _ := unary(icpt, "/second", 50*ms, 0, false); !ran {
			t.Fatal("a route past MaxRoutes got an adaptive floor")
		}
	})
}

func TestAdaptiveHTTPStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder
		code := 500
		h := shortcircuit.NewMiddleware(shortcircuit.WithFloor(0),
			shortcircuit.WithAdaptiveFloor(shortcircuit.Adaptive{MinSamples: 3}),
			shortcircuit.WithObserver(rec.Observe),
		)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			spend(40 * ms)
			if _, ok := w.(http.Flusher); !ok {
				t.Error("the wrapped writer lost http.Flusher")
			}
			if code == 200 {
				io.WriteString(w, "ok") // implicit 200
				return
			}
			w.WriteHeader(code)
		}))
		for range 5 {
			serve(h, "/r", 0)
		}
		if e := rec.last(t); e.Success {
			t.Fatalf("a 500 counted as success: %+v", e)
		}
		if w := serve(h, "/r", 10*ms); w.Code != 500 {
			t.Fatalf("after 500s only: %d; want the handler's 500 (nothing learned)", w.Code)
		}
		code = 200
		for range 3 {
			serve(h, "/r", 0)
		}
		if w := serve(h, "/r", 10*ms); w.Code != 504 || !strings.Contains(w.Body.String(), "floor 39.7ms") || !near(rec.last(t).Floor, 40*ms) {
			t.Fatalf("after 200s: %d %q; want 504 with floor ≈40ms", w.Code, w.Body)
		}

		// The wrapped writer flushes, directly and through a ResponseController.
		f := shortcircuit.NewMiddleware(shortcircuit.WithAdaptiveFloor(shortcircuit.DefaultAdaptive), shortcircuit.WithObserver(rec.Observe))(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := http.NewResponseController(w).Flush(); err != nil {
					t.Errorf("ResponseController.Flush: %v", err)
				}
				w.(http.Flusher).Flush()
			}))
		if w := serve(f, "/flush", time.Second); !w.Flushed || w.Code != 200 || !rec.last(t).Success {
			t.Fatalf("flushing handler: flushed %v, code %d, event %+v", w.Flushed, w.Code, rec.last(t))
		}
	})
}

func TestCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if shortcircuit.ErrInsufficientBudget != deadline.ErrInsufficientBudget {
			t.Fatal("ErrInsufficientBudget is not deadline's sentinel")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*ms)
		defer cancel()
		err := shortcircuit.Check(ctx, 20*ms)
		var be *shortcircuit.BudgetError
		if !errors.As(err, &be) || be.Remaining != 5*ms || be.Needed != 20*ms || !errors.Is(err, shortcircuit.ErrInsufficientBudget) {
			t.Fatalf("Check = %v", err)
		}
		if err := shortcircuit.Check(ctx, 5*ms); err != nil {
			t.Fatalf("Check with enough left = %v", err)
		}
		if err := shortcircuit.Check(context.Background(), time.Hour); err != nil {
			t.Fatalf("Check without deadline = %v", err)
		}
	})
}

// TestHandlerErrorMapping: a *BudgetError from a handler becomes DeadlineExceeded;
// other errors and statuses pass unchanged.
func TestHandlerErrorMapping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		icpt := shortcircuit.UnaryServerInterceptor(shortcircuit.WithFloor(0))
		call := func(herr error) error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*ms)
			defer cancel()
			_, err := icpt(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/m"}, func(ctx context.Context, _ any) (any, error) {
				return nil, herr
			})
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*ms)
		defer cancel()
		budgetErr := shortcircuit.Check(ctx, 20*ms)
		err := call(budgetErr)
		if status.Code(err) != codes.DeadlineExceeded || status.Convert(err).Message() != "shortcircuit: insufficient time budget: 5ms left, need 20ms" {
			t.Fatalf("BudgetError mapped to %v", err)
		}
		plain := errors.New("plain")
		if err := call(plain); err != plain {
			t.Fatalf("plain error became %v", err)
		}
		st := status.Error(codes.Unavailable, "x")
		if err := call(st); err != st {
			t.Fatalf("status became %v", err)
		}
		sicpt := shortcircuit.StreamServerInterceptor()
		serr := sicpt(nil, fakeStream{ctx}, &grpc.StreamServerInfo{FullMethod: "/s"}, func(any, grpc.ServerStream) error { return budgetErr })
		if status.Code(serr) != codes.DeadlineExceeded {
			t.Fatalf("stream BudgetError mapped to %v", serr)
		}
	})
}

type fakeStream struct{ ctx context.Context }

func (f fakeStream) SetHeader(metadata.MD) error  { return nil }
func (f fakeStream) SendHeader(metadata.MD) error { return nil }
func (f fakeStream) SetTrailer(metadata.MD)       {}
func (f fakeStream) Context() context.Context     { return f.ctx }
func (f fakeStream) SendMsg(any) error            { return nil }
func (f fakeStream) RecvMsg(any) error            { return io.EOF }

func TestStreamRefusedBeforeHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*ms)
		defer cancel()
		ran := false
		err := shortcircuit.StreamServerInterceptor(shortcircuit.WithFloor(20*ms))(nil, fakeStream{ctx}, &grpc.StreamServerInfo{FullMethod: "/s"},
			func(any, grpc.ServerStream) error { ran = true; return nil })
		if ran || status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "5ms left, floor 20ms") {
			t.Fatalf("ran %v, err %v", ran, err)
		}
	})
}

type boom struct{ n int }

// TestPanicPropagates: the handler's own panic reaches the server unchanged, with and
// without the wrapped writer.
func TestPanicPropagates(t *testing.T) {
	value := &boom{42}
	catch := func(f func()) (v any) {
		defer func() { v = recover() }()
		f()
		return nil
	}
	for _, opts := range [][]shortcircuit.Option{
		nil,
		{shortcircuit.WithFloor(ms), shortcircuit.WithObserver(new(shortcircuit.Counter).Observe)},
		{shortcircuit.WithAdaptiveFloor(shortcircuit.DefaultAdaptive)},
	} {
		h := shortcircuit.NewMiddleware(opts...)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(value) }))
		if got := catch(func() { serve(h, "/p", time.Second) }); got != value {
			t.Errorf("HTTP: recovered %v; want the handler's own value", got)
		}
		if got := catch(func() { serve(h, "/p", 0) }); got != value {
			t.Errorf("HTTP, no deadline: recovered %v; want the handler's own value", got)
		}
		h = shortcircuit.NewMiddleware(opts...)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
		if got := catch(func() { serve(h, "/p", time.Second) }); got != http.ErrAbortHandler {
			t.Errorf("HTTP: recovered %v; want http.ErrAbortHandler", got)
		}
		icpt := shortcircuit.UnaryServerInterceptor(opts...)
		if got := catch(func() {
			icpt(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/p"}, func(context.Context, any) (any, error) { panic(value) })
		}); got != value {
			t.Errorf("gRPC: recovered %v; want the handler's own value", got)
		}
	}
}

// TestNilInputs: the guard never panics on its own account.
func TestNilInputs(t *testing.T) {
	shortcircuit.NewMiddleware(nil, shortcircuit.WithObserver(nil), shortcircuit.WithFloorFunc(nil))(http.NotFoundHandler()).
		ServeHTTP(httptest.NewRecorder(), &http.Request{Method: "GET"})
	if _, err := shortcircuit.UnaryServerInterceptor()(context.Background(), nil, nil,
		func(context.Context, any) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if err := shortcircuit.StreamServerInterceptor()(nil, fakeStream{context.Background()}, nil,
		func(any, grpc.ServerStream) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if shortcircuit.Admission(9).String() != "unknown" || shortcircuit.BelowFloor.String() != "below_floor" {
		t.Fatal("Admission names")
	}
}

func TestCounterConcurrent(t *testing.T) {
	var c shortcircuit.Counter
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 1000 {
				c.Observe(context.Background(), shortcircuit.Event{Admission: shortcircuit.Admission(j % 3), Overrun: time.Duration(i*1000+j) * time.Microsecond})
			}
		})
	}
	wg.Wait()
	s := c.Stats()
	if s.Admitted+s.Refused() != 4000 || s.MaxOverrun != 3999*time.Microsecond || s.Overruns != 3999 {
		t.Fatalf("stats %+v", s)
	}
}
