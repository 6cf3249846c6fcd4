package shortcircuit

import (
	"container/heap"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/internal/record"
)

// The service time is estimated as TCP estimates a round trip (RFC 6298): an average
// of the handler's durations, weight 1/8, and of their deviation from it, weight 1/4.
// A request that must queue must have its predicted wait and the average plus twice
// the deviation left: the average alone would queue half of the requests that have
// just enough, and a slot given to one that finishes late is taken from one that
// would finish. A request that finds a slot free and nobody waiting takes a slot
// from no one: if its route's floor is learned (P5 of its own durations), that
// floor has refused what has little chance to finish, and the limit adds nothing.
// The estimate is one per guard, shared by its routes, and errs late: used there,
// 35% of what it refused would have finished (the floor harness, lognormal route),
// and it refused a fast route's requests for a slow route's work. Without a learned floor (a static one,
// or a route still learning) the estimate is all that knows the work, and refuses
// with a slot free too.
const (
	serviceWeight = 8
	devWeight     = 4
	devFactor     = 2
)

// limiter caps the handlers running at once and queues the requests beyond the cap,
// admitting a request only when its predicted wait plus the service time fits in its
// remaining budget. It is the protocol-free core of the concurrency options.
// Its limit is static ([WithMaxConcurrency]) or moved by the adaptive rule (adapt,
// in adaptive.go); the queue and its orders are in queue.go.
type limiter struct {
	order    QueueOrder
	maxQueue int           // negative: DefaultQueueFactor × the current limit
	floor    time.Duration // the guard's static floor: the least service time assumed
	adapt    *adaptive     // nil: a static limit

	mu       sync.Mutex
	limit    int
	inflight int
	q        waitQueue
	seq      int64
	service  time.Duration // average handler duration; zero until the first is known
	dev      time.Duration // average deviation from it
	// idle is when the last handler ended, leaving none running (zero: not known);
	// afresh is set when a request is let through an estimate nothing corrected for
	// that long: the next duration learned starts the estimate anew.
	idle   time.Time
	afresh bool
	// fellAt is when the adaptive limit last fell: the requests admitted before
	// it waited inside the handler behind the higher limit's, and their
	// durations do not count in the service time (fell).
	fellAt time.Time
	// top is the highest level seen where levels are read (a request that
	// queued, or that came for a reserved slot), last at topAt: only it may
	// take the slots the adaptive limit reserves (reserved).
	top   criticality.Level
	topAt time.Time

	// The slots of the running handlers: when each started (zero: free), so that a
	// queued request's wait is predicted from when they should end.
	starts []time.Time
	free   []int
	ends   []time.Duration // scratch for predict
}

// take gives a slot to a handler starting at now and returns its number. l.mu is
// held.
func (l *limiter) take(now time.Time) int {
	if now.IsZero() {
		now = time.Now()
	}
	if n := len(l.free); n > 0 {
		i := l.free[n-1]
		l.free = l.free[:n-1]
		l.starts[i] = now
		return i
	}
	l.starts = append(l.starts, now)
	return len(l.starts) - 1
}

// give frees slot i. l.mu is held.
func (l *limiter) give(i int) {
	if i >= 0 && i < len(l.starts) && !l.starts[i].IsZero() {
		l.starts[i] = time.Time{}
		l.free = append(l.free, i)
	}
}

// queueBound is how many requests may wait. l.mu is held.
func (l *limiter) queueBound() int {
	if l.maxQueue >= 0 {
		return l.maxQueue
	}
	return DefaultQueueFactor * l.limit
}

// mean is the service time a wait is predicted with: the handler's average, and the
// floor only until one is known. The floor is the least time a request must have
// left to start, not what the handler takes: a 2 ms handler behind a 20 ms floor
// frees its slot every 2 ms. l.mu is held.
func (l *limiter) mean() time.Duration {
	if l.service > 0 {
		return l.service
	}
	return l.floor
}

// stale reports whether the estimate has gone uncorrected, no handler running, for
// as long as it says the work takes (need), and if so marks the estimate to start
// afresh from the next duration learned: a request it would refuse then runs. Only
// what runs corrects the estimate: a stall (every handler caught in it slow) could
// otherwise leave it above every budget, and the guard refusing everything, its
// handler idle, for good. (RFC 6298 likewise lets a sender clear its estimate after
// backing off.) l.mu is held.
func (l *limiter) stale(now time.Time, need time.Duration) bool {
	if l.inflight > 0 || l.idle.IsZero() || now.Sub(l.idle) < need {
		return false
	}
	l.afresh, l.idle = true, time.Time{}
	return true
}

// need is the time a request must have left to be started. l.mu is held.
func (l *limiter) need() time.Duration { return max(l.service+devFactor*l.dev, l.floor) }

func newLimiter(c *config) *limiter {
	l := &limiter{order: c.order, floor: c.floor, top: criticality.Sheddable}
	if a := c.adaptiveLimit; a != nil {
		l.adapt = newAdaptive(*a)
		l.limit = l.adapt.inForce()
	} else {
		l.limit = c.maxConcurrency
	}
	l.maxQueue = c.maxQueue // negative: DefaultQueueFactor × the current limit
	record.Limit(context.Background(), l.limit)
	return l
}

// entry is what acquire decided, and the numbers of the decision.
type entry struct {
	decision Admission
	queued   bool
	wait     time.Duration // time spent in the queue, or predicted (refusals on arrival)
	service  time.Duration // the service time the prediction used
	slot     int           // the slot of an admitted request, for release
	// displaced: Overloaded after queueing, its place taken by a newcomer the queue
	// serves first, at level by.
	displaced bool
	by        criticality.Level
}

// acquire waits for a slot for a request that arrived at now, with the given
// deadline. It returns with Admitted (the caller must call release) or with the
// refusal. learned is whether the request's route has a learned floor in force:
// the guard has then refused what has little chance to finish on that route, and a
// free slot adds no refusal.
func (l *limiter) acquire(ctx context.Context, now, deadline time.Time, has, learned bool) entry {
	l.mu.Lock()
	svc, need := l.mean(), l.need()
	if has && !learned && l.service > 0 && deadline.Sub(now) < need && !l.stale(now, need) {
		// No learned floor (a static one, or the route still learning): the
		// limit's estimate is all that knows the work. Refuse now, while the
		// caller can still go elsewhere, not after running out of time in the
		// handler.
		l.mu.Unlock()
		return entry{decision: CannotFinish, service: need}
	}
	free := l.inflight < l.limit && l.q.Len() == 0
	level, read := criticality.Critical, false
	if free && l.inflight >= l.limit-l.reserve() {
		// A reserved slot: for the highest level seen only.
		level, read = l.level(ctx, now), true
		free = level >= l.top
	}
	if free {
		l.inflight++
		slot := l.take(now)
		if l.adapt != nil {
			l.adapt.inFlight(now, l.inflight)
		}
		l.mu.Unlock()
		record.InFlight(ctx, 1)
		return entry{decision: Admitted, service: need, slot: slot}
	}
	if l.adapt != nil {
		l.adapt.held()
	}
	if l.service == 0 {
		svc, need = l.unknownWork(now, svc, need) // nothing learned yet: queue.go
	}
	// The level is read only here, where the request must queue (or came for a
	// reserved slot): a request that finds a slot free pays nothing for it.
	if !read {
		level = l.level(ctx, now)
	}
	w := l.newWaiter(deadline, has, level)
	ahead := l.ahead(w)
	wait := l.predict(ahead, svc)
	if has && deadline.Sub(now) < wait+need+l.worst(ahead, need) {
		// The mean rate of the slots cannot tell whether the slot this request
		// would get frees in time: ask when the running handlers should end.
		wait = l.predictAt(now, ahead, need)
	}
	if has && deadline.Sub(now) < wait+need {
		l.mu.Unlock()
		return entry{decision: CannotFinish, wait: wait, service: need}
	}
	if l.q.Len() >= l.queueBound() && !l.evictFor(w) {
		l.mu.Unlock()
		return entry{decision: Overloaded, wait: wait, service: need}
	}
	w.ready = make(chan struct{})
	heap.Push(&l.q, w)
	started := l.serveFree(now) // slots a reservation kept from the queue: w's, maybe
	l.mu.Unlock()
	record.QueueLength(ctx, 1)
	if started > 0 {
		record.InFlight(ctx, started)
	}
	return l.await(ctx, w, now, need, svc)
}

// reserve is how many slots at the top of the limit only the highest level seen
// may take (adaptive.reserved). l.mu is held.
func (l *limiter) reserve() int {
	if l.adapt == nil {
		return 0
	}
	return l.adapt.reserved()
}

// topSpan is how many mean durations the highest level seen stays the highest
// without being seen again: then a lower level takes its place, and the reserved
// slots with it.
const topSpan = 16

// level reads the level of a request that arrived at now and notes it: one at or
// above the highest seen becomes it; a lower one does once the highest has not
// been seen for topSpan mean durations. l.mu is held.
func (l *limiter) level(ctx context.Context, now time.Time) criticality.Level {
	v := criticality.From(ctx)
	if v >= l.top || l.topAt.IsZero() || now.Sub(l.topAt) > topSpan*l.mean() {
		l.top, l.topAt = v, now
	}
	return v
}

// serveFree hands the slots free while requests queue to the queue, at now: those
// a reservation kept from the lower levels queued, when a request of the highest
// level joins them. It returns how many it started. l.mu is held.
func (l *limiter) serveFree(now time.Time) int {
	if l.inflight >= l.limit {
		return 0
	}
	_, started := l.serveQueue(now)
	if l.adapt != nil && started > 0 {
		l.adapt.inFlight(now, l.inflight)
	}
	return started
}

// predict is how long a request with ahead queued before it would wait for a slot,
// queued now: all slots are taken, and slots free up at limit / service per unit of
// time. l.mu is held.
func (l *limiter) predict(ahead int, svc time.Duration) time.Duration {
	return time.Duration(int64(ahead+1) * int64(svc) / int64(max(l.limit, 1)))
}

// worst is how much later than predict the slot of such a request may free: the
// slot that serves it frees within one work time (need) of the one before it. l.mu
// is held.
func (l *limiter) worst(ahead int, need time.Duration) time.Duration {
	return need*time.Duration(ahead/max(l.limit, 1)+1) - l.predict(ahead, need)
}

// predictAt is when the slot of a request with ahead queued before it frees, from
// when the running handlers started:
// each ends within d (the time a request must have left to start: the mean service
// time and twice its deviation) of its start, and one overdue within a deviation;
// the queue ahead of w takes the first slots to free, and a slot freed serves the
// queue again d later. It errs late rather than early: a request it queues is
// served in time, and one it refuses is refused at once. l.mu is held.
func (l *limiter) predictAt(now time.Time, ahead int, d time.Duration) time.Duration {
	ends := l.ends[:0]
	for _, s := range l.starts {
		if !s.IsZero() {
			ends = append(ends, max(s.Add(d).Sub(now), l.dev))
		}
	}
	l.ends = ends
	if len(ends) == 0 {
		return l.predict(ahead, d)
	}
	slices.Sort(ends)
	// Handlers beyond the limit (it fell) free slots that serve no one.
	skip := min(max(l.inflight-l.limit, 0), len(ends)-1)
	serving := ends[skip:]
	return serving[ahead%len(serving)] + time.Duration(ahead/len(serving))*d
}

// predictEnd is the wait at the end of the queue: when to come back. l.mu need not be
// held.
func (l *limiter) predictEnd(svc time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Duration(int64(l.q.Len()+1) * int64(svc) / int64(max(l.limit, 1)))
}

// release gives back slot, of a request whose handler took took (zero: it did not
// run), and hands free slots to the queue, dropping the requests whose budget can no
// longer pay for the work.
func (l *limiter) release(slot int, took time.Duration) {
	l.releaseAt(slot, time.Time{}, took)
}

// releaseAt is release for a handler that ended at now (zero: not known, read the
// clock if the adaptive limit needs it).
func (l *limiter) releaseAt(slot int, now time.Time, took time.Duration) {
	l.mu.Lock()
	l.inflight--
	var began time.Time // when the request was admitted, for the adaptive limit
	if l.adapt != nil && slot >= 0 && slot < len(l.starts) {
		began = l.starts[slot]
	}
	l.give(slot)
	if l.adapt != nil {
		if now.IsZero() {
			now = time.Now()
		}
		l.adapt.inFlight(now, l.inflight)
	}
	if took > 0 {
		l.learn(now, began, took)
	}
	now, started := l.serveQueue(now)
	if l.inflight == 0 && l.service > 0 {
		if now.IsZero() {
			now = time.Now()
		}
		l.idle = now
	}
	if l.adapt != nil && started > 0 {
		l.adapt.inFlight(now, l.inflight)
	}
	l.mu.Unlock()
	record.InFlight(context.Background(), started-1)
}

// learn takes the duration of a handler admitted at began that ended at now into the
// service time and, with the adaptive limit, into the limit. l.mu is held.
func (l *limiter) learn(now, began time.Time, took time.Duration) {
	switch {
	case !began.IsZero() && began.Before(l.fellAt):
		// Admitted under a higher limit: its wait inside the handler is not
		// the lower limit's (fell).
	case l.service == 0 || l.afresh:
		l.service, l.dev, l.afresh = took, took/2, false
	default:
		d := took - l.service
		l.service += d / serviceWeight
		l.dev += (max(d, -d) - l.dev) / devWeight
	}
	if l.adapt != nil {
		if n := l.adapt.update(now, began, took, l.service); n != l.limit {
			if n < l.limit {
				l.fell(now, n)
			}
			l.limit = n
			record.Limit(context.Background(), n)
		}
	}
}

// fell scales the service time down for a limit falling to n at now: fewer handlers
// at once run no slower, and at most as fast as in proportion (above the knee, as
// many end a second at n as at the limit before: each waits inside the handler behind
// fewer), never faster than the handler's unloaded duration (nor slower than it was).
// The requests admitted before the fall waited inside the handler behind the higher
// limit's, and their durations do not count in the estimate (learn). Else the
// estimate would take some eight durations to forget that wait, and meanwhile refuse,
// as unable to finish in time, the requests the lower limit is there to serve: a
// lower window five times below the limit ran nearly empty in the tests' model. l.mu
// is held.
func (l *limiter) fell(now time.Time, n int) {
	r := float64(n) / float64(l.limit)
	l.fellAt = now
	l.service = min(l.service, max(time.Duration(float64(l.service)*r), time.Duration(l.adapt.unloaded()), 1))
	l.dev = time.Duration(float64(l.dev) * r)
}

// serveQueue hands the free slots to the queue in its order, at now (zero: read the
// clock when needed), dropping the requests whose budget can no longer pay for the
// work; it returns now, read or not, and how many it started. l.mu is held.
func (l *limiter) serveQueue(now time.Time) (time.Time, int) {
	need := l.need()
	started := 0
	for l.inflight < l.limit && l.q.Len() > 0 {
		if l.inflight >= l.limit-l.reserve() && l.q.ws[0].level < l.top {
			break // the reserved slots: for the highest level seen only
		}
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
		if now.IsZero() {
			now = time.Now()
		}
		w.slot = l.take(now)
		started++
		close(w.ready)
	}
	return now, started
}
