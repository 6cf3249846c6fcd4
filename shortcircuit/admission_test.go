package shortcircuit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"

	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// server is a guarded HTTP handler whose work takes work (in fake time), watching its
// context; it records the answers.
type server struct {
	t    *testing.T
	h    http.Handler
	c    *shortcircuit.Counter
	work time.Duration

	mu      sync.Mutex
	answers []answer
	running int
	peak    int
}

type answer struct {
	id         int
	code       int
	body       string
	header     http.Header
	start, end time.Time
}

func newServer(t *testing.T, work time.Duration, opts ...shortcircuit.Option) *server {
	s := &server{t: t, c: &shortcircuit.Counter{}, work: work}
	// No floor unless the test sets one: the figures below are the limit's alone.
	opts = append([]shortcircuit.Option{shortcircuit.WithFloor(0), shortcircuit.WithObserver(s.c.Observe)}, opts...)
	s.h = shortcircuit.NewMiddleware(opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.running++
		s.peak = max(s.peak, s.running)
		s.mu.Unlock()
		select {
		case <-time.After(s.work):
		case <-r.Context().Done():
		}
		s.mu.Lock()
		s.running--
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	return s
}

// send serves request id with the given budget (0: no deadline) on a goroutine of its
// own, recording the answer.
func (s *server) send(wg *sync.WaitGroup, id int, budget time.Duration) {
	s.sendFrom(context.Background(), wg, id, budget)
}

// sendFrom is send with a request context made from base.
func (s *server) sendFrom(base context.Context, wg *sync.WaitGroup, id int, budget time.Duration) {
	wg.Go(func() {
		ctx, cancel := base, context.CancelFunc(func() {})
		if budget > 0 {
			ctx, cancel = context.WithTimeout(ctx, budget)
		}
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/work", nil)
		rec := httptest.NewRecorder()
		start := time.Now()
		s.h.ServeHTTP(rec, req)
		s.mu.Lock()
		s.answers = append(s.answers, answer{id: id, code: rec.Code, body: rec.Body.String(), header: rec.Header(), start: start, end: time.Now()})
		s.mu.Unlock()
	})
}

func (s *server) answer(id int) answer {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.answers {
		if a.id == id {
			return a
		}
	}
	s.t.Fatalf("no answer to request %d", id)
	return answer{}
}

// teach runs n requests one after another, so that the guard learns the work's
// duration.
func (s *server) teach(n int) {
	var wg sync.WaitGroup
	for i := range n {
		s.send(&wg, -1-i, time.Second)
		wg.Wait()
	}
}

func TestLimitQueuesBeyondItsSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, 10*ms, shortcircuit.WithMaxConcurrency(2), shortcircuit.WithQueue(10, shortcircuit.FIFO))
		var wg sync.WaitGroup
		for i := range 5 {
			s.send(&wg, i, time.Second)
		}
		wg.Wait()
		if s.peak != 2 {
			t.Errorf("%d handlers ran at once; want the limit, 2", s.peak)
		}
		// Two at a time, 10 ms each: the fifth finishes at 30 ms.
		var last time.Duration
		for i := range 5 {
			a := s.answer(i)
			if a.code != http.StatusOK {
				t.Fatalf("request %d: %d %s", i, a.code, a.body)
			}
			last = max(last, a.end.Sub(a.start))
		}
		if last != 30*ms {
			t.Errorf("the last answer took %v; want 30ms", last)
		}
		if st := s.c.Stats(); st.Admitted != 5 || st.Queued != 3 || st.Refused() != 0 {
			t.Errorf("stats = %+v", st)
		}
	})
}

func TestRefusesWhatCannotFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, 10*ms, shortcircuit.WithMaxConcurrency(1), shortcircuit.WithQueue(8, shortcircuit.FIFO))
		s.teach(20) // the work takes 10 ms
		var wg sync.WaitGroup
		for i := range 3 {
			s.send(&wg, i, time.Second) // one runs, two wait: 20 ms of queue
		}
		synctest.Wait()
		// A wait of 30 ms predicted (two ahead and the running one, one slot), then
		// 10 ms of work: 35 ms cannot pay for it, 45 ms can.
		s.send(&wg, 10, 35*ms)
		synctest.Wait()
		a := s.answer(10) // answered at once, before any time passed
		if a.code != http.StatusGatewayTimeout || a.end != a.start || a.header.Get("grpc-retry-pushback-ms") != "-1" ||
			!strings.Contains(a.body, "cannot finish in time") || !strings.Contains(a.body, "a wait of 30.1ms predicted") {
			t.Errorf("refusal: %d after %v, pushback %q, %q", a.code, a.end.Sub(a.start), a.header.Get("grpc-retry-pushback-ms"), a.body)
		}
		s.send(&wg, 11, 45*ms)
		wg.Wait()
		if a := s.answer(11); a.code != http.StatusOK || a.end.Sub(a.start) != 40*ms {
			t.Errorf("request with 45 ms: %d after %v; want 200 after 40ms", a.code, a.end.Sub(a.start))
		}
		if st := s.c.Stats(); st.CannotFinish != 1 {
			t.Errorf("stats = %+v", st)
		}
	})
}

// With a slot free, a request whose time left cannot pay for the service time is
// refused at once too, not started to run out of time in the handler: its caller
// can still go elsewhere. So it is when the route has no learned floor (here a
// static one; or the route still learning): the limit's estimate is all that knows
// the work.
func TestRefusesWhatCannotFinishWithASlotFree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, 10*ms, shortcircuit.WithFloor(ms), shortcircuit.WithMaxConcurrency(4))
		s.teach(20) // the work takes 10 ms
		var wg sync.WaitGroup
		s.send(&wg, 1, 8*ms)
		wg.Wait()
		a := s.answer(1)
		if a.code != http.StatusGatewayTimeout || a.end != a.start || !strings.Contains(a.body, "cannot finish in time") {
			t.Errorf("8 ms left for 10 ms of work, a slot free: %d after %v, %q; want a refusal at once", a.code, a.end.Sub(a.start), a.body)
		}
		if st := s.c.Stats(); st.CannotFinish != 1 || st.Admitted != 20 {
			t.Errorf("stats = %+v", st)
		}
		s.send(&wg, 2, 12*ms) // enough: admitted
		wg.Wait()
		if a := s.answer(2); a.code != http.StatusOK {
			t.Errorf("12 ms left for 10 ms of work: %d %q", a.code, a.body)
		}
	})
}

// With a learned floor in force, a free slot adds no refusal of the limit's own: the
// request takes a slot from no one, and the route's floor, which refuses only what
// has little chance to finish on that route (P5 of its durations), decides. It
// refuses 8 ms for 10 ms of work at once, before the handler runs; 12 ms is
// admitted.
func TestAFreeSlotLeavesTheRefusalToALearnedFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, 10*ms, shortcircuit.WithAdaptiveFloor(shortcircuit.DefaultAdaptive), shortcircuit.WithMaxConcurrency(4))
		s.teach(20) // the work takes 10 ms
		var wg sync.WaitGroup
		s.send(&wg, 1, 8*ms)
		wg.Wait()
		if a, st := s.answer(1), s.c.Stats(); a.code != http.StatusGatewayTimeout || a.end != a.start || st.BelowFloor != 1 || st.CannotFinish != 0 {
			t.Errorf("8 ms left for 10 ms of work, a slot free: %d after %v, %q, %+v; want refused at once below the floor", a.code, a.end.Sub(a.start), a.body, st)
		}
		s.send(&wg, 2, 12*ms) // enough: admitted
		wg.Wait()
		if a := s.answer(2); a.code != http.StatusOK {
			t.Errorf("12 ms left for 10 ms of work: %d %q", a.code, a.body)
		}
	})
}

// The limit is one per guard, shared by its routes, and so is its estimate of the
// work: on a guard that serves mostly a 50 ms route, the estimate is tens of
// milliseconds. A request to the 2 ms route with 10 ms left, finding a slot free,
// finishes; once the route has learned its floor, the limit does not refuse it for
// the other route's work.
func TestAFreeSlotDoesNotRefuseAFastRouteForASlowOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &shortcircuit.Counter{}
		work := map[string]time.Duration{"/fast": 2 * ms, "/slow": 50 * ms}
		h := shortcircuit.NewMiddleware(shortcircuit.WithMaxConcurrency(8), shortcircuit.WithObserver(c.Observe))(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select { // the work, or the caller gone
				case <-time.After(work[r.URL.Path]):
				case <-r.Context().Done():
					w.WriteHeader(http.StatusGatewayTimeout)
				}
			}))
		serve := func(path string, left time.Duration) int {
			ctx, cancel := context.WithTimeout(context.Background(), left)
			defer cancel()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil))
			return rec.Code
		}
		for i := range 100 {
			path := "/slow"
			if i%4 == 0 {
				path = "/fast"
			}
			serve(path, time.Second)
		}
		if code := serve("/fast", 10*ms); code != http.StatusOK {
			t.Errorf("/fast (2 ms of work) with 10 ms left, a slot free, on a guard serving mostly /slow (50 ms): %d, %+v; want 200", code, c.Stats())
		}
	})
}

// The floor is the least time a request must have left to start, not the time the
// handler takes: with a 20 ms floor (the default) and a 2 ms handler, a queued
// request waits about 2 ms per request ahead, not 20.
func TestAFloorIsNoServiceTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, 2*ms, shortcircuit.WithFloor(20*ms), shortcircuit.WithMaxConcurrency(1), shortcircuit.WithQueue(8, shortcircuit.FIFO))
		s.teach(20)
		var wg sync.WaitGroup
		for i := range 3 {
			s.send(&wg, i, time.Second) // one runs, two wait: 4 ms of queue
		}
		synctest.Wait()
		// A wait of 6 ms, then 20 ms must be left to start: 30 ms pays for it.
		s.send(&wg, 10, 30*ms)
		wg.Wait()
		if a := s.answer(10); a.code != http.StatusOK || a.end.Sub(a.start) != 8*ms {
			t.Errorf("request with 30 ms behind three of 2 ms: %d after %v, %q; want 200 after 8ms", a.code, a.end.Sub(a.start), a.body)
		}
	})
}

func TestDropsAQueuedRequestBeforeItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, 10*ms, shortcircuit.WithMaxConcurrency(1))
		s.teach(20)
		s.work = 100 * ms // the handler turns slow: the prediction (10 ms) is wrong
		var wg sync.WaitGroup
		s.send(&wg, 0, time.Second)
		synctest.Wait()
		s.send(&wg, 1, 50*ms) // predicted 10 + 10 ms: queued
		wg.Wait()
		a := s.answer(1)
		// It leaves the queue when what is left (its deadline minus now) can no
		// longer pay for the work: before its deadline, never at it.
		if a.code != http.StatusGatewayTimeout || a.end.Sub(a.start) >= 50*ms || a.header.Get("grpc-retry-pushback-ms") != "-1" ||
			!strings.Contains(a.body, "in the queue") {
			t.Errorf("queued request: %d after %v, pushback %q, %q", a.code, a.end.Sub(a.start), a.header.Get("grpc-retry-pushback-ms"), a.body)
		}
		if st := s.c.Stats(); st.Dropped != 1 || st.Queued != 1 {
			t.Errorf("stats = %+v", st)
		}
	})
}

func TestOverloadedWhenTheQueueIsFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, 10*ms, shortcircuit.WithMaxConcurrency(1), shortcircuit.WithQueue(2, shortcircuit.FIFO))
		s.teach(20)
		var wg sync.WaitGroup
		for i := range 3 {
			s.send(&wg, i, time.Second) // one runs, two wait: the queue is full
		}
		synctest.Wait()
		s.send(&wg, 10, time.Second)
		s.send(&wg, 11, 0) // no deadline: refused all the same, the queue being full
		synctest.Wait()
		for _, id := range []int{10, 11} {
			a := s.answer(id)
			if a.code != http.StatusServiceUnavailable || a.end != a.start || a.header.Get("grpc-retry-pushback-ms") != "30" ||
				a.header.Get("Retry-After") != "1" || !strings.Contains(a.body, "come back in 30ms") {
				t.Errorf("request %d: %d after %v, pushback %q, Retry-After %q, %q", id, a.code, a.end.Sub(a.start),
					a.header.Get("grpc-retry-pushback-ms"), a.header.Get("Retry-After"), a.body)
			}
		}
		wg.Wait()
		if st := s.c.Stats(); st.Overloaded != 2 || st.Admitted != 20+3 {
			t.Errorf("stats = %+v", st)
		}
	})
}

// A request without a deadline is never refused for its budget: it waits its turn.
func TestNoDeadlineWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, 10*ms, shortcircuit.WithMaxConcurrency(1), shortcircuit.WithQueue(10, shortcircuit.FIFO))
		s.teach(20)
		var wg sync.WaitGroup
		for i := range 4 {
			s.send(&wg, i, 0)
		}
		wg.Wait()
		for i := range 4 {
			if a := s.answer(i); a.code != http.StatusOK {
				t.Errorf("request %d: %d %s", i, a.code, a.body)
			}
		}
	})
}

func TestQueueOrders(t *testing.T) {
	for _, tc := range []struct {
		order shortcircuit.QueueOrder
		want  []int // the queued requests in the order they ran
	}{
		{shortcircuit.FIFO, []int{1, 2, 3}},
		{shortcircuit.LIFO, []int{3, 2, 1}},
		{shortcircuit.EarliestDeadline, []int{2, 3, 1}},
	} {
		t.Run(tc.order.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newServer(t, 10*ms, shortcircuit.WithMaxConcurrency(1), shortcircuit.WithQueue(10, tc.order))
				var wg sync.WaitGroup
				s.send(&wg, 0, time.Second)
				synctest.Wait()
				// Arrivals in the order 1, 2, 3, budgets 900, 300, 600 ms.
				for _, r := range []struct {
					id     int
					budget time.Duration
				}{{1, 900 * ms}, {2, 300 * ms}, {3, 600 * ms}} {
					s.send(&wg, r.id, r.budget)
					synctest.Wait()
				}
				wg.Wait()
				var got []int
				for _, id := range []int{1, 2, 3} {
					a := s.answer(id)
					if a.code != http.StatusOK {
						t.Fatalf("request %d: %d %s", id, a.code, a.body)
					}
					got = append(got, id)
				}
				// Sort by the end of their work.
				for i := range got {
					for j := i + 1; j < len(got); j++ {
						if s.answer(got[j]).end.Before(s.answer(got[i]).end) {
							got[i], got[j] = got[j], got[i]
						}
					}
				}
				for i := range got {
					if got[i] != tc.want[i] {
						t.Fatalf("ran in the order %v; want %v", got, tc.want)
					}
				}
			})
		})
	}
}

// A full LIFO queue evicts its oldest request for a newcomer, telling it to come back.
func TestLIFOEvictsTheOldest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, 10*ms, shortcircuit.WithMaxConcurrency(1), shortcircuit.WithQueue(1, shortcircuit.LIFO))
		var wg sync.WaitGroup
		s.send(&wg, 0, time.Second)
		synctest.Wait()
		s.send(&wg, 1, time.Second)
		synctest.Wait()
		s.send(&wg, 2, time.Second)
		wg.Wait()
		if a := s.answer(1); a.code != http.StatusServiceUnavailable || a.header.Get("grpc-retry-pushback-ms") == "" {
			t.Errorf("the evicted request: %d, pushback %q", a.code, a.header.Get("grpc-retry-pushback-ms"))
		}
		if a := s.answer(2); a.code != http.StatusOK {
			t.Errorf("the newcomer: %d %s", a.code, a.body)
		}
	})
}

// At light load nothing is refused or queued.
func TestLightLoadIsNeverRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, 10*ms, shortcircuit.WithMaxConcurrency(8))
		var wg sync.WaitGroup
		// 400 requests a second for 8 slots of 10 ms (800 a second): half the capacity,
		// budgets from 50 ms.
		var sent sync.WaitGroup
		sent.Add(400)
		for i := range 400 {
			time.AfterFunc(time.Duration(i)*2500*time.Microsecond, func() {
				s.send(&wg, i, time.Duration(50+i%250)*ms)
				sent.Done()
			})
		}
		sent.Wait()
		wg.Wait()
		if st := s.c.Stats(); st.Admitted != 400 || st.Refused() != 0 {
			t.Errorf("stats = %+v", st)
		}
	})
}

// A handler's panic gives its slot back.
func TestPanicGivesTheSlotBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := shortcircuit.NewMiddleware(shortcircuit.WithMaxConcurrency(1))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/panic" {
				panic("handler bug")
			}
		}))
		func() {
			defer func() {
				if recover() == nil {
					t.Error("the panic did not come through the guard")
				}
			}()
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/panic", nil))
		}()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/ok", nil))
		if rec.Code != http.StatusOK {
			t.Errorf("after a panic: %d %s", rec.Code, rec.Body.String())
		}
	})
}

// The adaptive limit through the middleware, in fake time: a handler with 8 slots of
// a resource (beyond them requests queue inside it) and 40 callers that each send
// again as soon as answered. The limit, from 20, finds that latency grows with
// concurrency beyond the 8 slots and lets in a little more than 8, not the 40.
func TestAdaptiveLimitFindsTheHandlersSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slots := make(chan struct{}, 8)
		var mu sync.Mutex
		inside, peak := 0, 0
		h := shortcircuit.NewMiddleware(shortcircuit.WithAdaptiveConcurrency(shortcircuit.DefaultAdaptiveLimit))(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				inside++
				peak = max(peak, inside)
				mu.Unlock()
				slots <- struct{}{}
				<-time.After(10 * ms) // the work (fake time)
				<-slots
				mu.Lock()
				inside--
				mu.Unlock()
			}))
		var wg sync.WaitGroup
		stop := time.Now().Add(10 * time.Second)
		var answered, refused int
		for range 40 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
					cancel()
					mu.Lock()
					if rec.Code == http.StatusOK {
						answered++
					} else {
						refused++
					}
					mu.Unlock()
					if rec.Code != http.StatusOK {
						<-time.After(10 * ms) // a refused caller comes back a little later (fake time)
					}
				}
			})
			<-time.After(time.Microsecond) // the callers start one after another (fake time)
		}
		// Read the peak of the last 5 s only: reset it half way (fake time).
		<-time.After(5 * time.Second)
		mu.Lock()
		peak = inside
		mu.Unlock()
		wg.Wait()
		t.Logf("%d answered, %d refused in 10 s; at most %d in the handler in the last 5 s", answered, refused, peak)
		if peak > 20 || peak < 8 {
			t.Errorf("%d requests in the handler at once; want a little above its 8 slots", peak)
		}
		// 8 slots × 10 ms is 800 a second: most of the capacity is used.
		if answered < 6000 {
			t.Errorf("%d answered in 10 s; want most of the 8000 the slots can serve", answered)
		}
	})
}

// Streams are not held to the concurrency limit: two run at once under a limit of 1.
func TestStreamsAreNotLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in := shortcircuit.StreamServerInterceptor(shortcircuit.WithMaxConcurrency(1), shortcircuit.WithQueue(0, shortcircuit.FIFO))
		release := make(chan struct{})
		var entered sync.WaitGroup
		entered.Add(2)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				err := in(nil, fakeStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: "/s/M"}, func(any, grpc.ServerStream) error {
					entered.Done()
					<-release
					return nil
				})
				if err != nil {
					t.Errorf("stream: %v", err)
				}
			})
		}
		entered.Wait() // both handlers run at once
		close(release)
		wg.Wait()
	})
}

// Eight slots, all taken by handlers that started together 1 ms ago: no slot frees
// for 9 ms. The mean rate of the slots (one every 1.25 ms) would queue a request with
// 15 ms left and drop it 4 ms later, when its budget could no longer pay for the
// 10 ms of work; the ends of the running handlers say at once that it cannot finish,
// and it is refused before any time passes, while its caller can still go
// elsewhere. One with 25 ms left is queued and answered after 19 ms.
func TestRefusesOnArrivalWhatTheRunningHandlersLeaveNoTimeFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, 10*ms, shortcircuit.WithMaxConcurrency(8), shortcircuit.WithQueue(8, shortcircuit.FIFO))
		s.teach(20) // the work takes 10 ms
		var wg sync.WaitGroup
		for i := range 8 {
			s.send(&wg, i, time.Second)
		}
		<-time.After(ms) // fake time: the 8 handlers started 1 ms ago
		synctest.Wait()
		s.send(&wg, 10, 15*ms)
		synctest.Wait()
		a := s.answer(10)
		if a.code != http.StatusGatewayTimeout || a.end != a.start || !strings.Contains(a.body, "cannot finish in time") ||
			!strings.Contains(a.body, "a wait of 9ms predicted") {
			t.Errorf("request with 15 ms: %d after %v: %q; want 504 at once, a wait of 9ms predicted", a.code, a.end.Sub(a.start), a.body)
		}
		s.send(&wg, 11, 25*ms)
		wg.Wait()
		if a := s.answer(11); a.code != http.StatusOK || a.end.Sub(a.start) != 19*ms {
			t.Errorf("request with 25 ms: %d after %v: %q; want 200 after 19ms", a.code, a.end.Sub(a.start), a.body)
		}
		if st := s.c.Stats(); st.CannotFinish != 1 || st.Dropped != 0 {
			t.Errorf("stats = %+v; want one refusal on arrival, none dropped from the queue", st)
		}
	})
}

// Before any handler has ended, the limit knows no service time, but it knows how
// long the running handlers have run without ending: the work takes at least that.
// Two slots, taken 50 ms ago by handlers of 100 ms: a request with 30 ms left cannot
// finish, and is refused at once, while its caller can still go elsewhere, not
// queued on a predicted wait of nothing and dropped when its time runs out. One
// with 400 ms left is queued and answered when a slot frees and its work is done.
func TestRefusesOnArrivalBeforeAnyDurationIsKnown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, 100*ms, shortcircuit.WithMaxConcurrency(2), shortcircuit.WithQueue(2, shortcircuit.FIFO))
		var wg sync.WaitGroup
		for i := range 2 {
			s.send(&wg, i, time.Second)
		}
		<-time.After(50 * ms) // fake time: the 2 handlers started 50 ms ago
		synctest.Wait()
		s.send(&wg, 10, 30*ms)
		synctest.Wait()
		a := s.answer(10)
		if a.code != http.StatusGatewayTimeout || a.end != a.start || !strings.Contains(a.body, "cannot finish in time") {
			t.Errorf("request with 30 ms behind handlers running for 50 ms: %d after %v: %q; want 504 at once, cannot finish", a.code, a.end.Sub(a.start), a.body)
		}
		s.send(&wg, 11, 400*ms)
		wg.Wait()
		if a := s.answer(11); a.code != http.StatusOK || a.end.Sub(a.start) != 150*ms {
			t.Errorf("request with 400 ms: %d after %v: %q; want 200 after 150ms", a.code, a.end.Sub(a.start), a.body)
		}
		if st := s.c.Stats(); st.CannotFinish != 1 || st.Dropped != 0 {
			t.Errorf("stats = %+v; want one refusal on arrival, none dropped from the queue", st)
		}
	})
}
