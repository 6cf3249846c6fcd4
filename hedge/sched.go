package hedge

import (
	"sync"
	"time"
)

// firer is what the scheduler wakes: a call whose hedge is due.
type firer interface{ fire() }

// slot is a call's place in its Hedger's scheduler: at most one pending wake-up.
type slot struct {
	due    time.Time
	pos    int  // index in the heap plus one; 0 when not scheduled
	popped bool // taken off the heap to fire: its owner may still be woken
	owner  firer
}

// scheduler wakes calls when their hedge is due, with one timer for all the calls of
// a Hedger instead of one per call. The timer is armed for the earliest call waiting.
// A call that ends before its hedge (most do) leaves the timer as it is unless it
// was the last one waiting, in which case the timer is stopped: a timer left to fire
// on an idle process wakes it for nothing, which on a call that takes longer than a
// loopback round trip cost more than stopping and arming again (about 30 µs against
// 14 µs per 1.5 ms call, BenchmarkStackBusyHandler's shape). When the timer fires
// with nothing due, it is armed again for the earliest call still waiting; under
// concurrent calls it thus fires about once per hedge delay, however many calls are
// in flight, where a timer per call is armed and stopped for each.
//
// Wake-ups run on the timer's goroutine, each due call after the first on a
// goroutine of its own, as a timer per call would run them.
type scheduler struct {
	mu    sync.Mutex
	heap  []*slot
	timer *time.Timer
	armed bool
	at    time.Time // when the timer fires, when armed
}

// add schedules s to fire at due (now is a recent reading of the clock).
func (q *scheduler) add(s *slot, due, now time.Time) {
	q.mu.Lock()
	s.due = due
	q.heap = append(q.heap, s)
	s.pos = len(q.heap)
	q.up(s.pos - 1)
	if !q.armed || due.Before(q.at) {
		q.arm(due, now)
	}
	q.mu.Unlock()
}

// remove takes s off the schedule if it is on it, and reports whether s was ever
// taken off to fire (its owner may be woken still, or has been). The timer is stopped
// when no call is left waiting.
func (q *scheduler) remove(s *slot) (popped bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if i := s.pos - 1; i >= 0 {
		last := len(q.heap) - 1
		if i != last {
			q.swap(i, last)
		}
		q.heap[last] = nil
		q.heap = q.heap[:last]
		if i != last {
			q.down(i)
			q.up(i)
		}
		s.pos = 0
		if len(q.heap) == 0 && q.armed {
			q.timer.Stop()
			q.armed = false
		}
	}
	return s.popped
}

// arm sets the timer to fire at due. q.mu is held.
func (q *scheduler) arm(due, now time.Time) {
	d := due.Sub(now)
	if q.timer == nil {
		q.timer = time.AfterFunc(d, q.run)
	} else {
		q.timer.Reset(d)
	}
	q.armed, q.at = true, due
}

// run wakes the calls that are due, and re-arms the timer for the next one.
func (q *scheduler) run() {
	var due []firer
	var one [4]firer
	q.mu.Lock()
	now := time.Now()
	due = one[:0]
	for len(q.heap) > 0 && !q.heap[0].due.After(now) {
		s := q.heap[0]
		due = append(due, s.owner)
		q.removeTop()
	}
	q.armed = false
	if len(q.heap) > 0 {
		q.arm(q.heap[0].due, now)
	}
	q.mu.Unlock()
	for i, f := range due {
		if i == len(due)-1 {
			f.fire()
		} else {
			go f.fire()
		}
	}
}

func (q *scheduler) removeTop() {
	last := len(q.heap) - 1
	q.heap[0].pos, q.heap[0].popped = 0, true
	if last > 0 {
		q.heap[0] = q.heap[last]
		q.heap[0].pos = 1
	}
	q.heap[last] = nil
	q.heap = q.heap[:last]
	if last > 0 {
		q.down(0)
	}
}

func (q *scheduler) swap(i, j int) {
	q.heap[i], q.heap[j] = q.heap[j], q.heap[i]
	q.heap[i].pos, q.heap[j].pos = i+1, j+1
}

func (q *scheduler) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !q.heap[i].due.Before(q.heap[p].due) {
			return
		}
		q.swap(i, p)
		i = p
	}
}

func (q *scheduler) down(i int) {
	n := len(q.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && q.heap[r].due.Before(q.heap[l].due) {
			m = r
		}
		if !q.heap[m].due.Before(q.heap[i].due) {
			return
		}
		q.swap(i, m)
		i = m
	}
}
