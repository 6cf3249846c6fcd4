package shortcircuit

import (
	"container/heap"
	"context"
	"math"
	"time"

	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/internal/record"
)

// Shedding by level. Every queued request has a level (package criticality, read
// from its context; critical when it carries none), and the queue serves the levels
// from the highest down, each in the queue's order. Three rules follow, and together
// they keep the SRE book's contract: a level is refused only while every lower one
// is.
//
//   - A request's predicted wait counts only the queued requests served before it:
//     those at a higher level, and those its order puts first at its own. A critical
//     request is never refused as unable to finish for sheddable work queued ahead
//     of it; that work will wait behind it.
//   - A full queue makes room for a newcomer by refusing the request it serves last,
//     if the newcomer goes before it: that request is at the lowest level queued
//     (within it, the newest in FIFO order, the oldest in LIFO, the one with the
//     most time left in EarliestDeadline). A level is refused as overloaded only when
//     the queue holds no lower one to displace, so every lower level is refused too.
//     The displaced request is answered at once, as a refusal on arrival is: 503 /
//     ResourceExhausted and "come back in" the predicted wait of the queue's end.
//   - Within a level, nothing changes: the order, the eviction and the predictions
//     are those of a queue holding that level alone.
//
// A slot is never taken back from a running handler, and the limit itself (static or
// adaptive) is one for all levels: the adaptive rule learns from every request held
// back and every handler's duration, whatever their level, so the levels change whom
// the limit refuses, never what it learns. One exception, the adaptive limit's step
// above the knee: a request let in on it waits inside the handler, in the handler's
// order, so while the limit holds that step only the highest level seen lately (top,
// for topSpan mean durations) may take it, and the rest wait in this queue, where a
// higher level goes first. A request that comes for that step has its level read. Requests at the lowest levels may wait as
// long as higher ones keep arriving: with a deadline they leave the queue when their
// time left can no longer pay for the work (Dropped); without one they wait.

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
	level    criticality.Level
	by       criticality.Level // set with evicted: the level of the newcomer it made room for
}

// before reports whether the queue serves w before o: a higher level first, then
// the smaller key.
func (w *waiter) before(o *waiter) bool {
	if w.level != o.level {
		return w.level > o.level
	}
	return w.key < o.key
}

// newWaiter is a request about to queue, keyed for the queue's order. l.mu is held.
func (l *limiter) newWaiter(deadline time.Time, has bool, level criticality.Level) *waiter {
	w := &waiter{deadline: deadline, has: has, index: -1, level: level}
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
// queue serves last, if w goes before it; false when w does not. l.mu is held.
func (l *limiter) evictFor(w *waiter) bool {
	worst := l.evictee(w)
	if worst == nil || !w.before(worst) {
		return false
	}
	heap.Remove(&l.q, worst.index)
	worst.evicted = true
	worst.by = w.level
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
		e.displaced, e.by = true, w.by
		e.wait = l.predictEnd(svc)
	default:
		e.decision = Dropped
	}
	return e
}

// unknownWork is the service time, and the time a request must have left to be
// started, that the wait of a request about to queue is predicted with while no
// handler under the limit has ended (svc and need: the static floor's). Every slot
// is taken, and no handler has ended since the oldest running one started: take
// the work to be at least as long as that one has run. Without it the wait predicted
// would be nothing (the floor's, 1 ms by default), and a request that cannot get a
// slot in time would be queued, and dropped when its time ran out instead of at
// once, while its caller could still go elsewhere. It errs toward queueing: the
// oldest handler may end at once, and the request's work may be shorter. l.mu is
// held.
func (l *limiter) unknownWork(now time.Time, svc, need time.Duration) (time.Duration, time.Duration) {
	var ran time.Duration
	for _, s := range l.starts {
		if !s.IsZero() {
			ran = max(ran, now.Sub(s))
		}
	}
	return max(svc, ran), max(need, ran)
}

// ahead is how many queued requests the queue serves before w: every one at a
// higher level, and those the order puts first at w's. l.mu is held.
func (l *limiter) ahead(w *waiter) int {
	ahead := l.q.above(w.level)
	switch l.order {
	case FIFO:
		ahead += l.q.at(w.level)
	case EarliestDeadline:
		if l.q.at(w.level) == 0 {
			break
		}
		for _, o := range l.q.ws {
			if o.level == w.level && o.key <= w.key {
				ahead++
			}
		}
	}
	return ahead
}

// evictee is the queued request a full queue gives up first for newcomer w: the
// one it serves last, or nil when w cannot go before it (w's level is below every
// queued one, or, in FIFO order, no queued one is below w's: w is last at its
// level). l.mu is held.
func (l *limiter) evictee(w *waiter) *waiter {
	low, ok := l.q.lowest()
	if !ok || low > w.level || (l.order == FIFO && low == w.level) {
		return nil
	}
	var worst *waiter
	for _, o := range l.q.ws {
		if o.level == low && (worst == nil || o.key > worst.key) {
			worst = o
		}
	}
	return worst
}

// levels is the number of levels: from criticality.Sheddable to CriticalPlus.
const levels = int(criticality.CriticalPlus-criticality.Sheddable) + 1

// waitQueue is a heap of waiters in the order the queue serves them (before), with
// the number queued at each level.
type waitQueue struct {
	ws []*waiter
	n  [levels]int // by level, Sheddable first
}

func levelIndex(l criticality.Level) int { return int(l - criticality.Sheddable) }

// at is how many are queued at level l.
func (q *waitQueue) at(l criticality.Level) int { return q.n[levelIndex(l)] }

// above is how many are queued at the levels above l.
func (q *waitQueue) above(l criticality.Level) int {
	n := 0
	for _, c := range q.n[levelIndex(l)+1:] {
		n += c
	}
	return n
}

// lowest is the lowest level queued; false when the queue is empty.
func (q *waitQueue) lowest() (criticality.Level, bool) {
	for i, c := range q.n {
		if c > 0 {
			return criticality.Sheddable + criticality.Level(i), true
		}
	}
	return 0, false
}

func (q *waitQueue) Len() int           { return len(q.ws) }
func (q *waitQueue) Less(i, j int) bool { return q.ws[i].before(q.ws[j]) }
func (q *waitQueue) Swap(i, j int) {
	q.ws[i], q.ws[j] = q.ws[j], q.ws[i]
	q.ws[i].index, q.ws[j].index = i, j
}
func (q *waitQueue) Push(x any) {
	w := x.(*waiter)
	w.index = len(q.ws)
	q.ws = append(q.ws, w)
	q.n[levelIndex(w.level)]++
}
func (q *waitQueue) Pop() any {
	old := q.ws
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.index = -1
	q.ws = old[:len(old)-1]
	q.n[levelIndex(w.level)]--
	return w
}
