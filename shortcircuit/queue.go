package shortcircuit

import (
	"container/heap"
	"context"
	"math"
	"time"

	"github.com/deadlinekit/deadlinekit/internal/record"
)

// QueueOrder is the order in which queued requests get a free slot.
type QueueOrder uint8

const (
	// FIFO serves the queue in order of arrival.
	FIFO QueueOrder = iota
	// LIFO serves the newest request first; a full queue evicts its oldest.
	LIFO
	// EarliestDeadline serves the request with the least time left first (requests
	// without a deadline last); a full queue evicts the one with the most time left,
	// which has the most time to come back.
	EarliestDeadline
)

var orderNames = [...]string{FIFO: "fifo", LIFO: "lifo", EarliestDeadline: "earliest_deadline"}

// String returns "fifo", "lifo" or "earliest_deadline".
func (o QueueOrder) String() string {
	if int(o) < len(orderNames) {
		return orderNames[o]
	}
	return "unknown"
}

// waiter is one queued request.
type waiter struct {
	key      int64 // the queue's priority: smaller goes first
	deadline time.Time
	has      bool
	index    int           // in the heap; -1 once out of it
	ready    chan struct{} // closed when the request leaves the queue
	granted  bool          // set before ready is closed: a slot is the request's
	slot     int           // the slot, once granted
	evicted  bool          // set before ready is closed: refused, overloaded
}

// newWaiter is a request about to queue, keyed for the queue's order. l.mu is held.
func (l *limiter) newWaiter(deadline time.Time, has bool) *waiter {
	w := &waiter{deadline: deadline, has: has, index: -1}
	l.seq++
	switch l.order {
	case LIFO:
		w.key = -l.seq
	case EarliestDeadline:
		w.key = math.MaxInt64
		if has {
			w.key = deadline.UnixNano()
		}
	default:
		w.key = l.seq
	}
	return w
}

// evictFor makes room in the full queue for w by refusing the queued request the
// order serves last, if w goes before it; false when w does not. l.mu is held.
func (l *limiter) evictFor(w *waiter) bool {
	worst := l.evictee()
	if worst == nil || worst.key <= w.key {
		return false
	}
	heap.Remove(&l.q, worst.index)
	worst.evicted = true
	close(worst.ready)
	return true
}

// await waits in the queue until w is granted a slot, is evicted, its caller leaves,
// or its budget can no longer pay for the work (need), and says which.
func (l *limiter) await(ctx context.Context, w *waiter, now time.Time, need, svc time.Duration) entry {
	var timeout <-chan time.Time
	if w.has {
		// The moment the budget can no longer pay for the work: leave then, not at
		// the deadline.
		t := time.NewTimer(w.deadline.Sub(now) - need)
		defer t.Stop()
		timeout = t.C
	}
	e := entry{queued: true, service: need}
	select {
	case <-w.ready:
	case <-timeout:
	case <-ctx.Done():
	}
	l.mu.Lock()
	if w.index >= 0 { // still queued: the timer or the caller ended the wait
		heap.Remove(&l.q, w.index)
	}
	l.mu.Unlock()
	e.wait = time.Since(now)
	record.QueueLength(ctx, -1)
	switch {
	case w.granted && ctx.Err() == nil:
		e.decision = Admitted
		e.slot = w.slot
	case w.granted:
		l.release(w.slot, 0) // granted as the caller left: give the slot on
		fallthrough
	case ctx.Err() != nil:
		e.decision = Canceled
		if w.has && !time.Now().Before(w.deadline) {
			e.decision = Dropped
		}
	case w.evicted:
		e.decision = Overloaded
		e.wait = l.predictEnd(svc)
	default:
		e.decision = Dropped
	}
	return e
}

// ahead is how many queued requests the queue's order serves before w. l.mu is held.
func (l *limiter) ahead(w *waiter) int {
	ahead := 0
	switch l.order {
	case FIFO:
		ahead = l.q.Len()
	case EarliestDeadline:
		for _, o := range l.q {
			if o.key <= w.key {
				ahead++
			}
		}
	}
	return ahead
}

// evictee is the queued request a full queue gives up first for a better newcomer:
// none in FIFO order, else the one served last. l.mu is held.
func (l *limiter) evictee() *waiter {
	if l.order == FIFO {
		return nil
	}
	var worst *waiter
	for _, o := range l.q {
		if worst == nil || o.key > worst.key {
			worst = o
		}
	}
	return worst
}

// waitQueue is a heap of waiters by key.
type waitQueue []*waiter

func (q waitQueue) Len() int           { return len(q) }
func (q waitQueue) Less(i, j int) bool { return q[i].key < q[j].key }
func (q waitQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *waitQueue) Push(x any) {
	w := x.(*waiter)
	w.index = len(*q)
	*q = append(*q, w)
}
func (q *waitQueue) Pop() any {
	old := *q
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.index = -1
	*q = old[:len(old)-1]
	return w
}
