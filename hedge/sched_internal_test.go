package hedge

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

type recorder struct {
	mu    *sync.Mutex
	fired *[]int
	id    int
}

func (r recorder) fire() {
	r.mu.Lock()
	*r.fired = append(*r.fired, r.id)
	r.mu.Unlock()
}

// TestSchedulerOrder: calls wake in the order they are due, at the time they are due,
// those removed never wake, and one timer serves them all.
func TestSchedulerOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var q scheduler
		var mu sync.Mutex
		var fired []int
		rng := rand.New(rand.NewPCG(1, 2))
		start := time.Now()
		slots := make([]*slot, 200)
		var want []int
		for i := range slots {
			slots[i] = &slot{owner: recorder{&mu, &fired, i}}
			// Dues 1..200 ms in a shuffled order, so the heap is exercised.
			q.add(slots[i], start.Add(time.Duration(1+rng.IntN(200))*time.Millisecond), start)
		}
		for i := range slots {
			if i%3 == 0 {
				q.remove(slots[i])
				q.remove(slots[i]) // twice is harmless
			} else {
				want = append(want, i)
			}
		}
		slices.SortStableFunc(want, func(a, b int) int { return slots[a].due.Compare(slots[b].due) })
		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(fired) != len(want) {
			t.Fatalf("%d wake-ups; want %d", len(fired), len(want))
		}
		// Those due at the same instant may wake in any order; the dues must not go back.
		for i := 1; i < len(fired); i++ {
			if slots[fired[i]].due.Before(slots[fired[i-1]].due) {
				t.Fatalf("wake-up %d (due %v) after %d (due %v)", fired[i], slots[fired[i]].due.Sub(start), fired[i-1], slots[fired[i-1]].due.Sub(start))
			}
		}
		if len(q.heap) != 0 || q.armed {
			t.Errorf("after all fired: %d waiting, armed %v", len(q.heap), q.armed)
		}
	})
}

// TestSchedulerWakesOnTime: a wake-up is never early, and is not late when the
// timer was armed for an earlier call that has gone, whether the timer was stopped
// (no call left waiting) or left running (another call waits).
func TestSchedulerWakesOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var q scheduler
		var mu sync.Mutex
		var fired []int
		var at []time.Duration
		start := time.Now()
		early := &slot{owner: recorder{&mu, &fired, 0}}
		q.add(early, start.Add(10*time.Millisecond), start)
		q.remove(early) // the call ended before its hedge, the last waiting: timer stopped
		q.mu.Lock()
		if q.armed {
			t.Error("timer armed with no call waiting")
		}
		q.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		now := time.Now()
		late := &slot{owner: firerFunc(func() {
			mu.Lock()
			at = append(at, time.Since(start))
			mu.Unlock()
		})}
		q.add(late, now.Add(30*time.Millisecond), now)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(fired) != 0 || len(at) != 1 || at[0] != 35*time.Millisecond {
			t.Fatalf("removed call woke %d times; the other woke at %v, want [35ms]", len(fired), at)
		}
	})
}

type firerFunc func()

func (f firerFunc) fire() { f() }

// TestSchedulerKeepsTimerForOthers: a call that ends while another waits leaves the
// timer running; it fires for nothing, then is armed for the call still waiting.
func TestSchedulerKeepsTimerForOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var q scheduler
		var at []time.Duration
		var mu sync.Mutex
		start := time.Now()
		first := &slot{owner: firerFunc(func() { t.Error("a removed call woke") })}
		second := &slot{owner: firerFunc(func() {
			mu.Lock()
			at = append(at, time.Since(start))
			mu.Unlock()
		})}
		q.add(first, start.Add(10*time.Millisecond), start)
		q.add(second, start.Add(25*time.Millisecond), start)
		q.remove(first)
		q.mu.Lock()
		if !q.armed || !q.at.Equal(start.Add(10*time.Millisecond)) {
			t.Errorf("after the first call ended: armed %v for %v; want still armed for 10ms", q.armed, q.at.Sub(start))
		}
		q.mu.Unlock()
		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(at) != 1 || at[0] != 25*time.Millisecond {
			t.Errorf("second call woke at %v; want [25ms]", at)
		}
	})
}
