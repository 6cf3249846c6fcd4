package admissioncmp

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// ends runs jobs of work ms started at their offsets (ms) under a sharer with the
// given knee, and returns when each was done, in ms from the start; cancel[i] > 0
// removes job i at that time instead.
func ends(t *testing.T, knee int, start, work, cancel []int) []time.Duration {
	t.Helper()
	out := make([]time.Duration, len(start))
	synctest.Test(t, func(t *testing.T) {
		p := newSharer(func(time.Time) int { return knee }, new(atomic.Int64))
		t0 := time.Now()
		done := make(chan struct{}, len(start))
		for i := range start {
			go func() {
				defer func() { done <- struct{}{} }()
				time.Sleep(time.Duration(start[i]) * time.Millisecond)
				j := p.add(time.Duration(work[i]) * time.Millisecond)
				var stop <-chan time.Time
				if cancel != nil && cancel[i] > 0 {
					stop = time.After(time.Duration(cancel[i]-start[i]) * time.Millisecond)
				}
				select {
				case <-j.done:
				case <-stop:
					p.remove(j)
				}
				out[i] = time.Since(t0)
			}()
		}
		for range start {
			<-done
		}
	})
	return out
}

func TestSharerSharesTheKnee(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name                string
		knee                int
		start, work, cancel []int
		want                []time.Duration
	}{
		// Up to the knee, every job runs at full speed.
		{"under the knee", 4, []int{0, 0, 3}, []int{10, 10, 10}, nil, []time.Duration{10 * ms, 10 * ms, 13 * ms}},
		// Four at once over a knee of 2: each at half speed, all done at 20 ms.
		{"twice the knee", 2, []int{0, 0, 0, 0}, []int{10, 10, 10, 10}, nil, []time.Duration{20 * ms, 20 * ms, 20 * ms, 20 * ms}},
		// Knee 1: the first runs alone for 5 ms, then both at half speed until
		// the first is done at 15 ms; the second's last 5 ms alone, done at 20.
		{"one joins", 1, []int{0, 5}, []int{10, 10}, nil, []time.Duration{15 * ms, 20 * ms}},
		// Knee 1: the second leaves at 10 ms having done 2.5 ms; the first
		// speeds up again: 7.5 ms done by 10, done at 12.5.
		{"one leaves", 1, []int{0, 5}, []int{10, 10}, []int{0, 10}, []time.Duration{12500 * time.Microsecond, 10 * ms}},
	} {
		got := ends(t, c.knee, c.start, c.work, c.cancel)
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: job %d ended at %v, want %v (all: %v)", c.name, i, got[i], c.want[i], got)
			}
		}
	}
}

// A timer that fires late delays the answers, not the work: the jobs done on the
// way are ended where they were, and the rest had the capacity they left.
func TestSharerLateTimerLosesNoWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newSharer(func(time.Time) int { return 1 }, new(atomic.Int64))
		t0 := time.Now()
		a, b := p.add(5*time.Millisecond), p.add(10*time.Millisecond)
		p.mu.Lock()
		p.timer.Stop()
		// Both at half speed until a is done at 10 ms; b alone from there: done at 15.
		p.advance(t0.Add(15 * time.Millisecond))
		left := len(p.jobs)
		p.mu.Unlock()
		for i, j := range []*job{a, b} {
			select {
			case <-j.done:
			default:
				t.Errorf("job %d not done at 15 ms (%d left)", i, left)
			}
		}
	})
}

// The idle share counts the knee's capacity no job used, inside the measured
// part only: knee 2, from 10 ms to 40 ms, one job working 10–30 ms and a second
// 20–30 ms leaves 1 of 2 unused for 10 ms, 0 for 10 ms and 2 for 10 ms: half.
func TestSharerIdleCountsUnusedCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var from atomic.Int64
		p := newSharer(func(time.Time) int { return 2 }, &from)
		t0 := time.Now()
		from.Store(t0.Add(10 * time.Millisecond).UnixNano())
		p.until.Store(t0.Add(40 * time.Millisecond).UnixNano())
		time.Sleep(10 * time.Millisecond)
		a := p.add(20 * time.Millisecond)
		time.Sleep(10 * time.Millisecond)
		b := p.add(10 * time.Millisecond)
		<-a.done
		<-b.done
		time.Sleep(30 * time.Millisecond)
		if got := p.idle(); got < 0.499 || got > 0.501 {
			t.Fatalf("idle = %.3f, want 0.5", got)
		}
	})
}
