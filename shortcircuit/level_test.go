package shortcircuit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// sendAt is send for a request at level l.
func (s *server) sendAt(wg *sync.WaitGroup, id int, budget time.Duration, l criticality.Level) {
	s.sendFrom(criticality.With(context.Background(), l), wg, id, budget)
}

// ranInOrder returns ids sorted by the end of their answers, failing unless each was
// served.
func (s *server) ranInOrder(ids ...int) []int {
	s.t.Helper()
	for _, id := range ids {
		if a := s.answer(id); a.code != http.StatusOK {
			s.t.Fatalf("request %d: %d %s", id, a.code, a.body)
		}
	}
	got := slices.Clone(ids)
	slices.SortStableFunc(got, func(a, b int) int { return s.answer(a).end.Compare(s.answer(b).end) })
	return got
}

// A full queue gives a higher level's newcomer the place of the request it serves
// last, which is refused at once with when to come back; once the queue holds no
// lower level, the newcomer's level is refused, and so is every level below it.
func TestAFullQueueShedsTheLowestLevelFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, 10*ms, shortcircuit.WithMaxConcurrency(1), shortcircuit.WithQueue(2, shortcircuit.FIFO))
		s.teach(20)
		var wg sync.WaitGroup
		s.send(&wg, 0, time.Second) // runs
		synctest.Wait()
		s.sendAt(&wg, 1, time.Second, criticality.Sheddable)
		synctest.Wait()
		s.sendAt(&wg, 2, time.Second, criticality.SheddablePlus)
		synctest.Wait() // the queue is full: 2 (sheddable_plus) before 1 (sheddable)
		s.send(&wg, 3, time.Second)
		synctest.Wait() // displaces 1, the lowest level
		s.sendAt(&wg, 4, time.Second, criticality.CriticalPlus)
		synctest.Wait() // displaces 2
		for _, id := range []int{1, 2} {
			a := s.answer(id)
			if a.code != http.StatusServiceUnavailable || a.end != a.start || a.header.Get("grpc-retry-pushback-ms") == "" ||
				!strings.Contains(a.body, "come back in") || !strings.Contains(a.body, "place in the queue taken by a") {
				t.Errorf("displaced request %d: %d after %v, pushback %q, %q; want 503 at once with when to come back",
					id, a.code, a.end.Sub(a.start), a.header.Get("grpc-retry-pushback-ms"), a.body)
			}
		}
		if a := s.answer(1); !strings.Contains(a.body, "by a critical request") {
			t.Errorf("request 1 was displaced by the critical one: %q", a.body)
		}
		// The queue holds critical and critical_plus: critical and every level
		// below are refused; critical_plus still displaces critical.
		for id, l := range map[int]criticality.Level{5: criticality.Critical, 6: criticality.SheddablePlus, 7: criticality.Sheddable} {
			s.sendAt(&wg, id, time.Second, l)
		}
		synctest.Wait()
		for _, id := range []int{5, 6, 7} {
			if a := s.answer(id); a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "the queue full") {
				t.Errorf("request %d into a queue of higher levels: %d %q; want refused, the queue full", id, a.code, a.body)
			}
		}
		s.sendAt(&wg, 8, time.Second, criticality.CriticalPlus)
		wg.Wait()
		if a := s.answer(3); a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "by a critical_plus request") {
			t.Errorf("request 3, displaced by 8: %d %q", a.code, a.body)
		}
		// critical_plus in order of arrival, then critical.
		if got, want := s.ranInOrder(0, 4, 8), []int{0, 4, 8}; !slices.Equal(got, want) {
			t.Errorf("ran in the order %v; want %v", got, want)
		}
		if st := s.c.Stats(); st.Overloaded != 6 || st.Admitted != 20+3 {
			t.Errorf("stats = %+v", st)
		}
	})
}

// A request's predicted wait counts only the queued requests served before it: a
// critical request behind a queue of sheddable ones is not refused as unable to
// finish; it goes first.
func TestACriticalRequestWaitsOnlyForItsLevelAndAbove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, 10*ms, shortcircuit.WithMaxConcurrency(1), shortcircuit.WithQueue(16, shortcircuit.FIFO))
		s.teach(20)
		var wg sync.WaitGroup
		s.send(&wg, 0, time.Second)
		synctest.Wait()
		for i := range 5 {
			s.sendAt(&wg, 1+i, time.Second, criticality.Sheddable) // 50 ms of queue
			synctest.Wait()
		}
		synctest.Wait()
		// 35 ms left: the running one (10 ms), then 10 ms of work. Counting the
		// sheddable queue it would have been refused.
		s.send(&wg, 10, 35*ms)
		synctest.Wait()
		s.sendAt(&wg, 11, 35*ms, criticality.Sheddable) // behind the queue: cannot finish
		wg.Wait()
		if a := s.answer(10); a.code != http.StatusOK || a.end.Sub(a.start) != 20*ms {
			t.Errorf("critical request behind 5 sheddable: %d after %v, %q; want 200 after 20ms", a.code, a.end.Sub(a.start), a.body)
		}
		if a := s.answer(11); a.code != http.StatusGatewayTimeout || !strings.Contains(a.body, "cannot finish in time") {
			t.Errorf("sheddable request with 35 ms behind 5 sheddable: %d %q; want refused as unable to finish", a.code, a.body)
		}
		if got, want := s.ranInOrder(0, 10, 1, 2, 3, 4, 5), []int{0, 10, 1, 2, 3, 4, 5}; !slices.Equal(got, want) {
			t.Errorf("ran in the order %v; want %v", got, want)
		}
	})
}

// The queue serves the levels from the highest down, and within a level keeps its
// order: the orders of TestQueueOrders, for each of two levels interleaved.
func TestQueueOrdersWithinALevel(t *testing.T) {
	for _, tc := range []struct {
		order shortcircuit.QueueOrder
		want  []int
	}{
		{shortcircuit.FIFO, []int{2, 4, 6, 1, 3, 5}},
		{shortcircuit.LIFO, []int{6, 4, 2, 5, 3, 1}},
		{shortcircuit.EarliestDeadline, []int{4, 6, 2, 3, 5, 1}},
	} {
		t.Run(tc.order.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newServer(t, 10*ms, shortcircuit.WithMaxConcurrency(1), shortcircuit.WithQueue(10, tc.order))
				var wg sync.WaitGroup
				s.send(&wg, 0, time.Second)
				synctest.Wait()
				// Odd ids sheddable, even critical; budgets 900, 300, 600 ms in each.
				for i, budget := range []time.Duration{900 * ms, 900 * ms, 300 * ms, 300 * ms, 600 * ms, 600 * ms} {
					l := criticality.Critical
					if i%2 == 0 {
						l = criticality.Sheddable
					}
					s.sendAt(&wg, i+1, budget, l)
					synctest.Wait()
				}
				wg.Wait()
				if got := s.ranInOrder(1, 2, 3, 4, 5, 6); !slices.Equal(got, tc.want) {
					t.Errorf("ran in the order %v; want %v", got, tc.want)
				}
			})
		})
	}
}

// Under a flood of sheddable requests sharing the limit with critical ones that need
// under half of it, no critical request is refused, and the sheddable ones get the
// rest of the handler's capacity: with the static limit and with the adaptive one,
// whose handler has 8 slots (it learns where they end from the durations, whatever
// the requests' levels).
func TestACriticalRequestIsNotRefusedWhileSheddableOnesAre(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  shortcircuit.Option
	}{
		{"static", shortcircuit.WithMaxConcurrency(8)},
		{"adaptive", shortcircuit.WithAdaptiveConcurrency(shortcircuit.DefaultAdaptiveLimit)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				slots := make(chan struct{}, 8) // the handler's capacity: 8 × 10 ms
				h := shortcircuit.NewMiddleware(tc.opt, shortcircuit.WithFloor(0), shortcircuit.WithQueue(16, shortcircuit.EarliestDeadline))(
					http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						slots <- struct{}{}
						<-time.After(10 * ms)
						<-slots
					}))
				var mu sync.Mutex
				served, refused := map[criticality.Level]int{}, map[criticality.Level]int{}
				var bodies []string
				send := func(wg *sync.WaitGroup, l criticality.Level) {
					wg.Go(func() {
						ctx, cancel := context.WithTimeout(criticality.With(context.Background(), l), 100*ms)
						defer cancel()
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/work", nil))
						mu.Lock()
						defer mu.Unlock()
						if rec.Code == http.StatusOK {
							served[l]++
						} else {
							refused[l]++
							if l == criticality.Critical {
								bodies = append(bodies, rec.Body.String())
							}
						}
					})
				}
				// Capacity 800 a second; critical 300 a second (one every 10 ms in
				// three places of the cycle), sheddable 4000 a second, for 2 s.
				var wg sync.WaitGroup
				for i := range 2000 {
					if i%10 == 0 || i%10 == 3 || i%10 == 7 {
						send(&wg, criticality.Critical)
					}
					for range 4 {
						send(&wg, criticality.Sheddable)
					}
					if i%10 == 9 {
						<-time.After(10 * ms) // the bubble's fake clock
					}
				}
				wg.Wait()
				if refused[criticality.Critical] != 0 {
					t.Errorf("%d critical requests refused (%d served); want none. First: %q",
						refused[criticality.Critical], served[criticality.Critical], bodies[0])
				}
				// The sheddable ones are served on what the critical ones leave: at
				// least half of the 500 a second spare.
				if got := served[criticality.Sheddable]; got < 500 {
					t.Errorf("%d sheddable requests served in 2 s, %d refused; want at least 500", got, refused[criticality.Sheddable])
				}
				t.Logf("critical: %d served; sheddable: %d served, %d refused", served[criticality.Critical],
					served[criticality.Sheddable], refused[criticality.Sheddable])
			})
		})
	}
}

// The adaptive limit learns the same whatever the levels of the requests: the same
// closed-loop load, all critical or half of it sheddable, is served at the same rate
// with as many handlers in flight (the rule measures the handler, not who asks;
// which request gets a slot changes, not how many run). Goroutines that wake at the
// same fake instant run in no set order, so two runs differ a little even at one
// level: the figures are compared within 3%.
func TestTheAdaptiveLimitLearnsTheSameFromEveryLevel(t *testing.T) {
	run := func(levels bool) (served int, inFlight float64) {
		synctest.Test(t, func(t *testing.T) {
			slots := make(chan struct{}, 8)
			var mu sync.Mutex
			inside, samples, sum := 0, 0, 0
			h := shortcircuit.NewMiddleware(shortcircuit.WithFloor(0), shortcircuit.WithQueue(8, shortcircuit.FIFO),
				shortcircuit.WithAdaptiveConcurrency(shortcircuit.DefaultAdaptiveLimit))(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					inside++
					mu.Unlock()
					slots <- struct{}{}
					<-time.After(10 * ms)
					<-slots
					mu.Lock()
					inside--
					served++
					mu.Unlock()
				}))
			start := time.Now()
			stop := start.Add(3 * time.Second)
			var wg sync.WaitGroup
			for i := range 40 { // closed loop: a refused client comes back 1 ms later
				ctx := context.Background()
				if levels && i%2 == 1 {
					ctx = criticality.With(ctx, criticality.Sheddable)
				}
				wg.Go(func() {
					for time.Now().Before(stop) {
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/work", nil))
						if rec.Code != http.StatusOK {
							<-time.After(ms)
						}
					}
				})
			}
			for time.Now().Before(stop) {
				<-time.After(5 * ms)
				mu.Lock()
				if time.Since(start) > time.Second { // after the first rounds
					samples++
					sum += inside
				}
				mu.Unlock()
			}
			wg.Wait()
			inFlight = float64(sum) / float64(samples)
		})
		return served, inFlight
	}
	near := func(a, b float64) bool { return a > 0.97*b && a < 1.03*b }
	allServed, allInFlight := run(false)
	halfServed, halfInFlight := run(true)
	t.Logf("all critical: %d served, %.1f handlers in flight; half sheddable: %d, %.1f", allServed, allInFlight, halfServed, halfInFlight)
	if !near(float64(halfServed), float64(allServed)) || !near(halfInFlight, allInFlight) {
		t.Errorf("half sheddable: %d served, %.1f handlers in flight; all critical: %d, %.1f; want the same within 3%%",
			halfServed, halfInFlight, allServed, allInFlight)
	}
}
