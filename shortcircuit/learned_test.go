package shortcircuit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// learnedGuard is a gRPC guard with the given options around a handler that takes
// work, in fake time; call runs one call with budget left and reports its code.
type learnedGuard struct {
	in   grpc.UnaryServerInterceptor
	work time.Duration
	rec  *recorder
}

func newLearnedGuard(work time.Duration, opts ...shortcircuit.Option) *learnedGuard {
	g := &learnedGuard{work: work, rec: &recorder{}}
	g.in = shortcircuit.UnaryServerInterceptor(append(opts, shortcircuit.WithObserver(g.rec.Observe))...)
	return g
}

func (g *learnedGuard) call(left time.Duration) codes.Code {
	ctx, cancel := context.WithTimeout(context.Background(), left)
	defer cancel()
	_, err := g.in(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/shop.Stock/Get"}, func(ctx context.Context, _ any) (any, error) {
		select { // the work, in the bubble's fake time; it stops with its context
		case <-time.After(g.work):
		case <-ctx.Done():
		}
		return nil, nil
	})
	return status.Code(err)
}

// The default floor follows what the route's handler takes: 1 ms until 20 durations
// are known, then their P5: a 3 ms handler admits 4 ms and refuses 2.5 ms, a
// 50 ms one refuses 30 ms.
func TestDefaultFloorIsLearned(t *testing.T) {
	for _, c := range []struct {
		work          time.Duration
		admit, refuse time.Duration
		wantFloor     time.Duration
		warmupAdmits  time.Duration // admitted while the route has not learned
		warmupRefuses time.Duration
	}{
		{work: 3 * ms, admit: 4 * ms, refuse: 2500 * time.Microsecond, wantFloor: 3 * ms, warmupAdmits: deadline.MinFloor, warmupRefuses: deadline.MinFloor / 2},
		{work: 50 * ms, admit: 51 * ms, refuse: 30 * ms, wantFloor: 50 * ms, warmupAdmits: 30 * ms, warmupRefuses: deadline.MinFloor / 2},
		// A handler under the minimum has the minimum; one past the maximum the maximum.
		{work: 100 * time.Microsecond, admit: deadline.MinFloor, refuse: deadline.MinFloor - time.Microsecond, wantFloor: deadline.MinFloor, warmupAdmits: deadline.MinFloor, warmupRefuses: deadline.MinFloor / 2},
		{work: 5 * time.Second, admit: time.Second, refuse: time.Second - ms, wantFloor: time.Second, warmupAdmits: 10 * ms, warmupRefuses: deadline.MinFloor / 2},
	} {
		synctest.Test(t, func(t *testing.T) {
			g := newLearnedGuard(c.work)
			// Warming up: 1 ms is the floor. (A call with too little time for
			// the work fails, and teaches nothing.)
			if code := g.call(c.warmupRefuses); code != codes.DeadlineExceeded {
				t.Errorf("work %v, warming up: %v left: %v; want DeadlineExceeded", c.work, c.warmupRefuses, code)
			}
			if code := g.call(c.warmupAdmits); code == codes.DeadlineExceeded && g.rec.last(t).Admission.Refused() {
				t.Errorf("work %v, warming up: %v left refused; want the 1 ms floor", c.work, c.warmupAdmits)
			}
			// Learning: concurrent calls, so that a 5 s handler's fill the
			// 10 s window too.
			var wg sync.WaitGroup
			for range shortcircuit.DefaultAdaptive.MinSamples {
				wg.Go(func() {
					if code := g.call(time.Hour); code != codes.OK {
						t.Errorf("work %v, learning: %v", c.work, code)
					}
				})
			}
			wg.Wait()
			if code := g.call(c.refuse); code != codes.DeadlineExceeded || g.rec.last(t).Admission != shortcircuit.BelowFloor {
				t.Errorf("work %v: %v left: %v (%v); want refused below the floor", c.work, c.refuse, code, g.rec.last(t).Admission)
			}
			if f := g.rec.last(t).Floor; !near(f, c.wantFloor) {
				t.Errorf("work %v: the floor in force %v; want %v", c.work, f, c.wantFloor)
			}
			g.call(c.admit)
			if e := g.rec.last(t); e.Admission != shortcircuit.Admitted {
				t.Errorf("work %v: %v left: %v; want admitted", c.work, c.admit, e.Admission)
			}
		})
	}
}

// The learned floor (P5) follows a handler that slows down once nearly all of the
// window is slow: until the fast durations have left it (at the latest one window,
// 10 s, later) it errs toward admitting. It follows a speed-up at once: a few fast
// calls are 5% of the window.
func TestDefaultFloorFollowsTheHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newLearnedGuard(2 * ms)
		for range 30 {
			g.call(time.Hour)
		}
		g.call(10 * ms)
		if f := g.rec.last(t).Floor; !near(f, 2*ms) {
			t.Fatalf("fast handler: floor %v; want 2ms", f)
		}
		g.work = 40 * ms
		for range 35 {
			g.call(time.Hour)
		}
		g.call(30 * ms)
		if e := g.rec.last(t); e.Admission != shortcircuit.Admitted || !near(e.Floor, 2*ms) {
			t.Errorf("slowed down, the fast calls still in the window: 30 ms left: %v, floor %v; want admitted (to be cut short), floor 2ms", e.Admission, e.Floor)
		}
		// Ten seconds on, the fast durations have left the window.
		<-time.After(11 * time.Second) // the bubble's clock jumps
		for range 30 {
			g.call(time.Hour)
		}
		if code := g.call(30 * ms); code != codes.DeadlineExceeded || !near(g.rec.last(t).Floor, 40*ms) ||
			g.rec.last(t).Admission != shortcircuit.BelowFloor {
			t.Errorf("slowed down for a window: 30 ms left: %v, floor %v; want refused, floor 40ms", code, g.rec.last(t).Floor)
		}
		// Two fast calls are 5% of the 32 durations in the window.
		g.work = 2 * ms
		for range 2 {
			g.call(time.Hour)
		}
		g.call(10 * ms)
		if e := g.rec.last(t); e.Admission != shortcircuit.Admitted || !near(e.Floor, 2*ms) {
			t.Errorf("sped up: 10 ms left: %v, floor %v; want admitted, floor 2ms", e.Admission, e.Floor)
		}
	})
}

// A static floor is still an option, and then nothing is learned: WithFloor(5 ms)
// admits 30 ms for a 50 ms handler. WithAdaptiveFloor beside it keeps both.
func TestStaticFloorReplacesTheLearnedOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, c := range []struct {
			name   string
			opts   []shortcircuit.Option
			admits bool
			floor  time.Duration
		}{
			{"static", []shortcircuit.Option{shortcircuit.WithFloor(5 * ms)}, true, 5 * ms},
			{"static and adaptive", []shortcircuit.Option{shortcircuit.WithFloor(5 * ms), shortcircuit.WithAdaptiveFloor(shortcircuit.DefaultAdaptive)}, false, 50 * ms},
			{"adaptive then static", []shortcircuit.Option{shortcircuit.WithAdaptiveFloor(shortcircuit.DefaultAdaptive), shortcircuit.WithFloor(5 * ms)}, false, 50 * ms},
		} {
			g := newLearnedGuard(50*ms, c.opts...)
			for range 25 {
				g.call(time.Hour)
			}
			g.call(30 * ms)
			e := g.rec.last(t)
			if e.Admission.Refused() == c.admits || !near(e.Floor, c.floor) {
				t.Errorf("%s: 30 ms left for a 50 ms handler: %v, floor %v; want admitted %v, floor %v", c.name, e.Admission, e.Floor, c.admits, c.floor)
			}
		}
	})
}

// A stream's life is no service time: the stream guard learns no floor by default,
// so that a route of long watches does not refuse a stream that has a second left.
func TestStreamGuardLearnsNothingByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		in := shortcircuit.StreamServerInterceptor(shortcircuit.WithObserver(rec.Observe))
		run := func(left, life time.Duration) {
			ctx, cancel := context.WithTimeout(context.Background(), left)
			defer cancel()
			in(nil, fakeStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: "/shop.Stock/Watch"}, func(any, grpc.ServerStream) error {
				select { // the stream's life, in the bubble's fake time
				case <-time.After(life):
				case <-ctx.Done():
				}
				return nil
			})
		}
		for range 30 {
			run(time.Hour, 10*time.Minute)
		}
		run(time.Second, 0)
		if e := rec.last(t); e.Admission != shortcircuit.Admitted || e.Floor != deadline.MinFloor {
			t.Errorf("a stream with 1 s left on a route of 10-minute streams: %v, floor %v; want admitted, floor 1ms", e.Admission, e.Floor)
		}
	})
}

// Over HTTP the route is learned per pattern (or path), as for gRPC per method.
func TestDefaultFloorIsLearnedPerHTTPRoute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		work := map[string]time.Duration{"/fast": 2 * ms, "/slow": 50 * ms}
		h := shortcircuit.NewMiddleware(shortcircuit.WithObserver(rec.Observe))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select { // the work, or the caller gone
			case <-time.After(work[r.URL.Path]):
			case <-r.Context().Done():
			}
		}))
		serve := func(path string, left time.Duration) int {
			ctx, cancel := context.WithTimeout(context.Background(), left)
			defer cancel()
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", path, nil).WithContext(ctx))
			return w.Code
		}
		for range 25 {
			serve("/fast", time.Hour)
			serve("/slow", time.Hour)
		}
		if code := serve("/fast", 30*ms); code != 200 {
			t.Errorf("/fast with 30 ms: %d; want 200", code)
		}
		if code := serve("/slow", 30*ms); code != 504 || !near(rec.last(t).Floor, 50*ms) {
			t.Errorf("/slow with 30 ms: %d, floor %v; want 504, floor 50ms", code, rec.last(t).Floor)
		}
	})
}

// A handler that ran until its context ended (the deadline passed, the caller left)
// teaches the floor nothing, whatever it answered: its duration is the budget it was
// given, not its service time. A guard that learned it would refuse every request
// with less than what the last callers were given, for a whole window after the
// downstream it waited on came back.
func TestCutShortCallsAreNotLearned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		hang := true
		h := shortcircuit.NewMiddleware(shortcircuit.WithObserver(rec.Observe))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if hang {
				<-r.Context().Done()
				w.WriteHeader(499) // what a handler relays for a caller that left
			}
		}))
		serve := func(left time.Duration) int {
			ctx, cancel := context.WithTimeout(context.Background(), left)
			defer cancel()
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/stock", nil).WithContext(ctx))
			return w.Code
		}
		for range 30 {
			serve(250 * ms)
		}
		hang = false
		if code := serve(100 * ms); code != 200 {
			t.Errorf("after 30 calls cut at their deadline: %d with 100 ms left, floor %v; want 200, the floor not learned from them", code, rec.last(t).Floor)
		}
	})
}

// The floor never stands above the durations it was learned from: the window keeps
// durations in bins up to a sixteenth wide, and the floor is the low edge of its
// bin, not the middle, so a 20 ms handler admits a request with 20.3 ms left, which
// it finishes, as it does one with 20 ms and a few microseconds.
func TestLearnedFloorIsNotAboveTheDurations(t *testing.T) {
	for _, left := range []time.Duration{20*ms + 5*time.Microsecond, 20300 * time.Microsecond} {
		t.Run(left.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newLearnedGuard(20 * ms)
				for range 25 {
					g.call(time.Hour)
				}
				g.call(left)
				if e := g.rec.last(t); e.Admission != shortcircuit.Admitted || e.Floor > 20*ms {
					t.Errorf("a 20 ms handler, %v left: %v, floor %v; want admitted, the floor at most 20ms", left, e.Admission, e.Floor)
				}
			})
		})
	}
}

// A duration the floor learns is the handler's own work, from when it got its slot:
// a wait in the guard's queue is not its work. One slot, a 10 ms handler, requests
// in bursts of five: each waits up to 40 ms for the slot, and its time in the guard
// is up to 50 ms; even P90 of the durations learned is 10 ms.
func TestLearnedFloorIsTheHandlersOwnWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		s := newServer(t, 10*ms, shortcircuit.WithMaxConcurrency(1), shortcircuit.WithQueue(8, shortcircuit.FIFO),
			shortcircuit.WithAdaptiveFloor(shortcircuit.Adaptive{Quantile: 0.9}), shortcircuit.WithObserver(rec.Observe))
		var wg sync.WaitGroup
		for burst := range 6 {
			for i := range 5 {
				s.send(&wg, burst*5+i, time.Second)
			}
			wg.Wait()
		}
		if st := s.c.Stats(); st.Admitted != 30 || st.Queued != 24 {
			t.Fatalf("stats = %+v; want 30 admitted, 24 of them queued", st)
		}
		s.send(&wg, 100, 20*ms)
		wg.Wait()
		if e := rec.last(t); e.Admission != shortcircuit.Admitted || !near(e.Floor, 10*ms) {
			t.Errorf("20 ms left after bursts that queued: %v, floor %v; want admitted, floor 10ms (the handler's work, not its wait)", e.Admission, e.Floor)
		}
	})
}
