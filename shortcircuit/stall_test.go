package shortcircuit_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// TestAStallDoesNotLeaveTheLimitRefusing: a handler of 4 slots × 100 ms behind the
// guard's static or adaptive limit is offered 10× its capacity with budgets in
// [0.6 s, 1.8 s], in fake time; at 8 s something else holds the 4 slots for 2.5 s (a
// stall: CPU steal, a pause). The durations of the handlers caught in it push the
// service time the limit wants left (average + 2 × deviation) above every budget.
// The limit must not then refuse every request cannot_finish for good, its handler
// idle, with nothing left to teach it a shorter time: with a learned floor a free
// slot leaves the refusal to the floor; with a static floor, a limit that has had no
// handler running for as long as its estimate lets one request through, whose
// duration starts the estimate afresh (as RFC 6298 lets a sender clear its estimate
// after backing off). Found by the criticality chain (a round whose backend did no
// work at all).
func TestAStallDoesNotLeaveTheLimitRefusing(t *testing.T) {
	for name, opts := range map[string][]shortcircuit.Option{
		"static 4":               {shortcircuit.WithMaxConcurrency(4)},
		"adaptive":               {shortcircuit.WithAdaptiveConcurrency(shortcircuit.DefaultAdaptiveLimit)},
		"static 4, static floor": {shortcircuit.WithMaxConcurrency(4), shortcircuit.WithFloor(time.Millisecond)},
		"adaptive, static floor": {shortcircuit.WithAdaptiveConcurrency(shortcircuit.DefaultAdaptiveLimit), shortcircuit.WithFloor(time.Millisecond)},
	} {
		t.Run(name, func(t *testing.T) { stuck(t, opts...) })
	}
}

func stuck(t *testing.T, opts ...shortcircuit.Option) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		admitted := map[int]int{}
		cannot := map[int]int{}
		start := time.Now()
		obs := shortcircuit.WithObserver(func(ctx context.Context, e shortcircuit.Event) {
			s := int(time.Since(start) / time.Second)
			mu.Lock()
			defer mu.Unlock()
			switch e.Admission {
			case shortcircuit.Admitted:
				admitted[s]++
			case shortcircuit.CannotFinish:
				cannot[s]++
			}
		})
		slots := make(chan struct{}, 4)
		work := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case slots <- struct{}{}:
			case <-r.Context().Done():
				w.WriteHeader(http.StatusGatewayTimeout)
				return
			}
			select {
			case <-time.After(100 * time.Millisecond):
			case <-r.Context().Done():
			}
			<-slots
		})
		h := shortcircuit.NewMiddleware(append(opts, obs)...)(work)
		// A stall at 8 s: the slots held for 2.5 s by something else (CPU steal, a pause).
		go func() {
			<-time.After(8 * time.Second)
			for range 4 {
				slots <- struct{}{}
			}
			<-time.After(2500 * time.Millisecond)
			for range 4 {
				<-slots
			}
		}()
		rng := rand.New(rand.NewPCG(1, 2))
		var wg sync.WaitGroup
		for i := range 400 * 30 {
			budget := 600*time.Millisecond + time.Duration(rng.Int64N(int64(1200*time.Millisecond)))
			<-time.After(time.Until(start.Add(time.Duration(i) * time.Second / 400)))
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), budget)
				defer cancel()
				r := httptest.NewRequest(http.MethodGet, "/work", nil).WithContext(ctx)
				h.ServeHTTP(httptest.NewRecorder(), r)
			})
		}
		wg.Wait()
		for s := range 30 {
			t.Logf("second %2d: admitted %3d, cannot_finish %3d", s, admitted[s], cannot[s])
			if s >= 15 && admitted[s] == 0 {
				t.Errorf("second %d, 4.5 s after the stall: nothing admitted, %d refused cannot_finish", s, cannot[s])
			}
		}
	})
}
