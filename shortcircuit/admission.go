package shortcircuit

import (
	"container/heap"
	"context"
	"math"
	"sync"
	"time"

	"github.com/deadlinekit/deadlinekit/otelattr"
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

// The service time is estimated as TCP estimates a round trip (RFC 6298): an average
// of the handler's durations, weight 1/8, and of their deviation from it, weight 1/4.
// A request must have the average plus twice the deviation left to be started: the
// average alone would start half of the requests that have just enough, and they
// would finish late.
const (
	serviceWeight = 8
	devWeight     = 4
	devFactor     = 2
)

// limiter caps the handlers running at once and queues the requests beyond the cap,
// admitting a request only when its predicted wait plus the service time fits in its
// remaining budget. It is the protocol-free core of the concurrency options.
type limiter struct {
	order    QueueOrder
	maxQueue int
	floor    time.Duration // the guard's static floor: the least service time assumed
	adapt    *gradient     // nil: a static limit
	tel      *otelattr.Admission

	mu       sync.Mutex
	limit    int
	inflight int
	q        waitQueue
	seq      int64
	service  time.Duration // average handler duration; zero until the first is known
	dev      time.Duration // average deviation from it
}

// mean is the service time a wait is predicted with. l.mu is held.
func (l *limiter) mean() time.Duration { return max(l.service, l.floor) }

// need is the time a request must have left to be started. l.mu is held.
func (l *limiter) need() time.Duration { return max(l.service+devFactor*l.dev, l.floor) }

func newLimiter(c *config) *limiter {
	l := &limiter{order: c.order, floor: c.floor, tel: otelattr.NewAdmission()}
	if a := c.adaptiveLimit; a != nil {
		l.adapt = newGradient(*a)
		l.limit = a.Initial
	} else {
		l.limit = c.maxConcurrency
	}
	l.maxQueue = c.maxQueue
	if l.maxQueue < 0 {
		l.maxQueue = DefaultQueueFactor * l.limit
		if l.adapt != nil {
			l.maxQueue = DefaultQueueFactor * l.adapt.cfg.Max
		}
	}
	l.tel.Limit(context.Background(), l.limit)
	return l
}

// waiter is one queued request.
type waiter struct {
	key      int64 // the queue's priority: smaller goes first
	deadline time.Time
	has      bool
	index    int           // in the heap; -1 once out of it
	ready    chan struct{} // closed when the request leaves the queue
	granted  bool          // set before ready is closed: a slot is the request's
	evicted  bool          // set before ready is closed: refused, overloaded
}

// entry is what acquire decided, and the numbers of the decision.
type entry struct {
	decision Decision
	queued   bool
	wait     time.Duration // time spent in the queue, or predicted (refusals on arrival)
	service  time.Duration // the service time the prediction used
}

// acquire waits for a slot for a request that arrived at now, with the given
// deadline. It returns with Admitted (the caller must call release) or with the
// refusal.
func (l *limiter) acquire(ctx context.Context, now, deadline time.Time, has bool) entry {
	l.mu.Lock()
	svc, need := l.mean(), l.need()
	if l.inflight < l.limit && l.q.Len() == 0 {
		l.inflight++
		l.mu.Unlock()
		l.tel.InFlight(ctx, 1)
		return entry{decision: Admitted, service: need}
	}
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
	wait := l.predict(w, svc)
	if has && deadline.Sub(now) < wait+need {
		l.mu.Unlock()
		return entry{decision: CannotFinish, wait: wait, service: need}
	}
	if l.q.Len() >= l.maxQueue {
		worst := l.worst()
		if worst == nil || worst.key <= w.key {
			l.mu.Unlock()
			return entry{decision: Overloaded, wait: wait, service: need}
		}
		heap.Remove(&l.q, worst.index)
		worst.evicted = true
		close(worst.ready)
	}
	w.ready = make(chan struct{})
	heap.Push(&l.q, w)
	l.mu.Unlock()
	l.tel.Queue(ctx, 1)

	var timeout <-chan time.Time
	if has {
		// The moment the budget can no longer pay for the work: leave then, not at
		// the deadline.
		t := time.NewTimer(deadline.Sub(now) - need)
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
	l.tel.Queue(ctx, -1)
	switch {
	case w.granted && ctx.Err() == nil:
		e.decision = Admitted
	case w.granted:
		l.release(0) // granted as the caller left: give the slot on
		fallthrough
	case ctx.Err() != nil:
		e.decision = Canceled
		if has && !time.Now().Before(deadline) {
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

// predict is how long w would wait for a slot, queued now: all slots are taken, and
// slots free up at limit / service per unit of time. l.mu is held.
func (l *limiter) predict(w *waiter, svc time.Duration) time.Duration {
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
	return time.Duration(int64(ahead+1) * int64(svc) / int64(max(l.limit, 1)))
}

// predictEnd is the wait at the end of the queue: when to come back. l.mu need not be
// held.
func (l *limiter) predictEnd(svc time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Duration(int64(l.q.Len()+1) * int64(svc) / int64(max(l.limit, 1)))
}

// worst is the queued request a full queue gives up first for a better newcomer:
// none in FIFO order, else the one served last. l.mu is held.
func (l *limiter) worst() *waiter {
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

// release gives back the slot of a request whose handler took took (zero: it did not
// run), and hands free slots to the queue, dropping the requests whose budget can no
// longer pay for the work.
func (l *limiter) release(took time.Duration) {
	l.mu.Lock()
	l.inflight--
	if took > 0 {
		if l.service == 0 {
			l.service, l.dev = took, took/2
		} else {
			d := took - l.service
			l.service += d / serviceWeight
			l.dev += (max(d, -d) - l.dev) / devWeight
		}
		if l.adapt != nil {
			if n := l.adapt.update(took, l.inflight+1); n != l.limit {
				l.limit = n
				l.tel.Limit(context.Background(), n)
			}
		}
	}
	need := l.need()
	started := 0
	var now time.Time
	for l.inflight < l.limit && l.q.Len() > 0 {
		w := heap.Pop(&l.q).(*waiter)
		if w.has {
			if now.IsZero() {
				now = time.Now()
			}
			if w.deadline.Sub(now) < need {
				close(w.ready) // dropped: acquire sees neither granted nor evicted
				continue
			}
		}
		w.granted = true
		l.inflight++
		started++
		close(w.ready)
	}
	l.mu.Unlock()
	l.tel.InFlight(context.Background(), started-1)
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

// gradient is the adaptive limit's rule (see [AdaptiveLimit]). Its owner serialises
// calls (limiter.mu).
type gradient struct {
	cfg         AdaptiveLimit
	limit       float64
	short, long float64 // averages of the handler's duration, ns
	samples     int
}

func newGradient(a AdaptiveLimit) *gradient {
	return &gradient{cfg: a, limit: float64(a.Initial)}
}

// longWeight and shortWeight are the weights of a new duration in the long and the
// short average: the long one follows the handler over a few hundred calls, the
// short one over the last few.
const (
	longWeight  = 1.0 / 500
	shortWeight = 1.0 / 10
)

// update takes one handler duration, with inflight handlers running when it ended
// (itself included), and returns the new limit.
func (g *gradient) update(took time.Duration, inflight int) int {
	v := float64(took)
	if g.samples == 0 {
		g.short, g.long = v, v
	} else {
		g.short += (v - g.short) * shortWeight
		g.long += (v - g.long) * longWeight
	}
	g.samples++
	if g.long > 2*g.short {
		// The handler became much faster: let the long average catch up, so that
		// the limit may grow again soon.
		g.long = 0.95*g.long + 0.05*g.short
	}
	if float64(inflight) < g.limit/2 {
		return int(g.limit) // the load, not the limit, keeps concurrency low: learn nothing
	}
	grad := min(max(g.cfg.Tolerance*g.long/g.short, 0.5), 1)
	next := g.limit*grad + math.Sqrt(g.limit)
	g.limit = min(max(g.limit*(1-g.cfg.Smoothing)+next*g.cfg.Smoothing, float64(g.cfg.Min)), float64(g.cfg.Max))
	return int(g.limit)
}
