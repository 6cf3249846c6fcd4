package shortcircuit

import (
	"container/heap"
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/deadlinekit/deadlinekit/internal/benchknob"
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
	maxQueue int           // negative: DefaultQueueFactor × the current limit
	floor    time.Duration // the guard's static floor: the least service time assumed
	adapt    *gradient     // nil: a static limit
	uniform  bool          // predict waits from the mean service time alone (benchknob)

	mu       sync.Mutex
	limit    int
	inflight int
	q        waitQueue
	seq      int64
	service  time.Duration // average handler duration; zero until the first is known
	dev      time.Duration // average deviation from it

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

// need is the time a request must have left to be started. l.mu is held.
func (l *limiter) need() time.Duration { return max(l.service+devFactor*l.dev, l.floor) }

func newLimiter(c *config) *limiter {
	l := &limiter{order: c.order, floor: c.floor, uniform: benchknob.UniformWait.Load()}
	if a := c.adaptiveLimit; a != nil {
		l.adapt = newGradient(*a)
		l.limit = l.adapt.inForce()
	} else {
		l.limit = c.maxConcurrency
	}
	l.maxQueue = c.maxQueue // negative: DefaultQueueFactor × the current limit
	record.Limit(context.Background(), l.limit)
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
	slot     int           // the slot, once granted
	evicted  bool          // set before ready is closed: refused, overloaded
}

// entry is what acquire decided, and the numbers of the decision.
type entry struct {
	decision Admission
	queued   bool
	wait     time.Duration // time spent in the queue, or predicted (refusals on arrival)
	service  time.Duration // the service time the prediction used
	slot     int           // the slot of an admitted request, for release
}

// acquire waits for a slot for a request that arrived at now, with the given
// deadline. It returns with Admitted (the caller must call release) or with the
// refusal.
func (l *limiter) acquire(ctx context.Context, now, deadline time.Time, has bool) entry {
	l.mu.Lock()
	svc, need := l.mean(), l.need()
	if has && l.service > 0 && deadline.Sub(now) < need {
		// Even a free slot cannot make the time left pay for the work: refuse now,
		// while the caller can still go elsewhere, not after running out of time
		// in the handler.
		l.mu.Unlock()
		return entry{decision: CannotFinish, service: need}
	}
	if l.inflight < l.limit && l.q.Len() == 0 {
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
	w := l.newWaiter(deadline, has)
	ahead := l.ahead(w)
	wait := l.predict(ahead, svc)
	if has && !l.uniform && deadline.Sub(now) < wait+need+l.worst(ahead, need) {
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
	l.mu.Unlock()
	record.QueueLength(ctx, 1)
	return l.await(ctx, w, now, need, svc)
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
		if l.service == 0 {
			l.service, l.dev = took, took/2
		} else {
			d := took - l.service
			l.service += d / serviceWeight
			l.dev += (max(d, -d) - l.dev) / devWeight
		}
		if l.adapt != nil {
			if n := l.adapt.update(now, began, took, l.service); n != l.limit {
				l.limit = n
				record.Limit(context.Background(), n)
			}
		}
	}
	need := l.need()
	started := 0
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
		if now.IsZero() {
			now = time.Now()
		}
		w.slot = l.take(now)
		started++
		close(w.ready)
	}
	if l.adapt != nil && started > 0 {
		l.adapt.inFlight(now, l.inflight)
	}
	l.mu.Unlock()
	record.InFlight(context.Background(), started-1)
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
// calls (limiter.mu) and reports every change of the handlers in flight (inFlight)
// and every request the limit held back (held).
//
// It runs the limit in three windows: an upper one at the limit, a lower one a step
// below it, an upper one again. Each starts when the handlers in flight reach its
// limit (see start) and measures, over the requests admitted under it, the
// time-averaged handlers in flight, n, and their mean duration, s. The
// lower window is compared with the mean of the two upper ones around it, so a
// handler that slows down or speeds up steadily across the three cancels out. The
// elasticity e = ln(s_upper/s_lower) / ln(n_upper/n_lower) says what the extra
// concurrency bought: near 0, the handler ran as fast with more at once
// (throughput n/s grew with n); near 1, each request took longer in proportion
// (throughput stayed, the extra requests only queued inside the handler). Below
// Tolerance the limit grows, if it held requests back; above, it falls to the knee
// the two windows' throughput places, never past the lower window. A slowdown that
// concurrency does not cause scales all windows alike and leaves e, and the limit,
// where they were. Settled (see [AdaptiveLimit]), it keeps a step of headroom above
// the knee (or Headroom's share of it), rechecked after a hold that doubles while
// the knee stays put, and the upper windows of rounds that keep the limit grow
// longer.
type gradient struct {
	cfg    AdaptiveLimit
	limit  int  // the operating limit: the upper windows'
	phase  int  // 0: the first upper window, 1: the lower one, 2: the second upper one
	run    int  // the last move, signed
	lo     int  // the lower window's limit (below, when it began)
	wide   bool // the last move was a fall (nearly) to the lower window: the next one is wider
	streak int  // moves in a row the same way

	// The window: its limit took force at since, its measure begins at from;
	// area is in-flight × time since then.
	since time.Time
	from  time.Time
	// toward: the handlers in flight have yet to reach the window's limit,
	// from below (1) or above (-1); the measure begins when they do, at the
	// latest one mean duration after since.
	toward int
	area   float64
	last   time.Time // the last change of the handlers in flight, cur
	cur    int
	sum    time.Duration
	n      int
	demand bool // the limit held a request back in the window

	calm    int // decisions in a row that kept the limit
	calmMax int
	first   bool    // the rule before the steady state (benchknob)
	ref     float64 // the mean duration of the last upper window
	// over: the limit is a step above the knee (overLimit); it holds for
	// overLeft more rounds that find it buys nothing, then a recheck (a round
	// whose lower window runs a step below the knee) places the knee again.
	// Found where it was, the hold doubles (overRounds, up to overMax).
	over, recheck                   bool
	overLimit, overLeft, overRounds int
	head                            int     // the headroom: the limit's distance above the knee, over
	grewOver                        bool    // the last grow began over the knee (a probe of the headroom)
	grewOn                          float64 // the elasticity of the last grow
	// base: the handler's unloaded mean duration, from the last lower window
	// found below the knee (zero: none since the handler last turned faster).
	base float64

	w [3]struct { // the figures of the windows so far
		n, s   float64
		demand bool
	}
}

// The steady state: after calm decisions in a row that kept the limit, the upper
// windows last 2^min(calm, calmMax) times as long; the headroom above the knee holds
// for up to overMax rounds before it is rechecked.
const (
	calmMax = 3
	overMax = 8
)

func newGradient(a AdaptiveLimit) *gradient {
	g := &gradient{cfg: a, limit: a.Initial, calmMax: calmMax}
	if benchknob.FirstAdaptiveLimit.Load() {
		g.first, g.calmMax = true, 0
	} else {
		// Initial is a guess: the first lower window goes half below it, as
		// after a fall, so that a limit far above the knee comes down in
		// fewer rounds.
		g.run, g.wide = -max(a.Initial/4, 1), true
	}
	return g
}

// inForce is the limit the limiter applies now.
func (g *gradient) inForce() int {
	if g.phase == 1 {
		return g.lo
	}
	return g.limit
}

// below is the lower window's limit: an eighth below the limit (at least one);
// after a fall (nearly) all the way to the lower window, twice that fall below it
// (at least a quarter, at most half the limit), so that the next fall goes to a
// limit measured to keep the throughput; rechecking a headroom, two steps below (a
// step below the knee).
func (g *gradient) below() int {
	gap := max(g.limit/8, 1)
	switch {
	case g.wide:
		gap = max(gap, g.limit/4, min(-2*g.run, max(g.limit/2, 1)))
	case g.over && g.recheck && g.cfg.Headroom > 0:
		gap = min(g.head+max((g.limit-g.head)/8, 1), g.limit-1)
	case g.over && g.recheck:
		gap = min(2*gap, g.limit-1)
	}
	return max(g.limit-gap, 1)
}

// inFlight records that n handlers run from now on.
func (g *gradient) inFlight(now time.Time, n int) {
	if g.toward != 0 && now.Before(g.from) && (n-g.inForce())*g.toward >= 0 {
		// The handlers in flight reached the window's limit: its measure
		// begins; rising, with the requests admitted from now on, which wait
		// behind as many as it lets into the handler.
		if g.toward > 0 {
			g.since = now
		}
		g.from, g.toward = now, 0
	}
	if !g.from.IsZero() && now.After(g.from) {
		from := g.from
		if g.last.After(from) {
			from = g.last
		}
		g.area += float64(g.cur) * float64(now.Sub(from))
	}
	g.cur, g.last = n, now
}

// held records a request that found the limit taken: it queued or was refused.
func (g *gradient) held() { g.demand = true }

// start begins a window whose limit took force at now. Its measure begins when the
// handlers in flight reach the limit (at once for a fall, whose admissions wait for
// that; for a rise, when the load has filled it), or at the latest after svc, the
// handler's mean duration; it counts only the requests admitted since the limit
// took force (for a rise, since it was reached).
func (g *gradient) start(now time.Time, svc time.Duration) {
	g.since, g.from = now, now.Add(max(svc, time.Millisecond))
	g.area, g.sum, g.n, g.demand = 0, 0, 0, false
	switch l := g.inForce(); {
	case g.cur == l:
		g.from, g.toward = now, 0
	case g.cur < l:
		g.toward = 1
	default:
		g.toward = -1
	}
}

// update takes one handler's duration, admitted at began (zero: not known) and
// ending at now, and the handler's mean duration svc; it returns the limit in
// force.
func (g *gradient) update(now, began time.Time, took, svc time.Duration) int {
	if g.from.IsZero() {
		// The first window begins when the limit first holds a request back:
		// before, the load set the concurrency (and, rising, the durations).
		if g.demand {
			g.start(now, svc)
		}
		return g.inForce()
	}
	if now.Before(g.from) || (!began.IsZero() && began.Before(g.since)) {
		// Admitted under the previous window's limit: it waited behind the
		// handlers that limit let in, and measures that one.
		return g.inForce()
	}
	g.sum += took
	g.n++
	samples, spans := g.windowNeeds()
	span := now.Sub(g.from)
	if g.n < samples || span < time.Duration(spans)*max(svc, time.Millisecond) {
		return g.inForce()
	}
	g.closeWindow(now, span)
	g.start(now, svc)
	return g.inForce()
}

// windowNeeds is how many completions, and how many service times, the current
// window needs before it measures: fewer in the lower window and while the limit
// moves, more (doubling) while it keeps still. In an upper window it first ends
// the steady state if the handler changed speed since the last one.
func (g *gradient) windowNeeds() (samples, spans int) {
	samples, spans = max(g.cfg.Samples/2, 1), 4
	if g.phase == 1 {
		samples, spans = max(g.cfg.Samples/4, 1), 2
		if g.wide {
			spans = 1 // see below
		}
	} else {
		if m := float64(g.sum) / float64(g.n); (g.calm > 0 || g.over) && g.run <= 0 && g.ref > 0 && g.n >= samples && (m > 1.2*g.ref || 1.2*m < g.ref) {
			// The handler changed speed since the last upper window: end the
			// long windows of the steady state, and learn again. Slower, a
			// headroom is rechecked at once: the knee may have fallen. (Faster,
			// a knee that rose shows in the next round as a gain.)
			g.calm = 0
			g.recheck = g.recheck || (g.over && m > g.ref)
			if m < g.ref {
				g.base = 0 // faster: the unloaded duration is not known
			}
		}
		scale := 1 << min(g.calm, g.calmMax)
		switch {
		case g.run > 0:
			scale = 1 // a grow, probe or not, is judged quickly
		case g.wide || g.run < 0:
			// Falling, or starting: a limit above the knee inflates the mean
			// duration the windows are measured in (20 handlers behind 4
			// slots take 5 times the work); one of them, and as many
			// completions as the lower window's, is enough to see the
			// throughput stay.
			scale, spans, samples = 1, 1, max(g.cfg.Samples/4, 1)
		}
		samples, spans = samples*scale, spans*scale
	}
	return samples, spans
}

// closeWindow records the window that ends at now, span long, and moves to the
// next one: at the end of the third, the limit moves by what they measured.
func (g *gradient) closeWindow(now time.Time, span time.Duration) {
	g.inFlight(now, g.cur) // close the area at now
	w := &g.w[g.phase]
	w.n, w.s, w.demand = g.area/float64(span), float64(g.sum)/float64(g.n), g.demand
	if g.phase != 1 && g.run <= 0 {
		g.ref = w.s // a window at a limit kept (a probe's is not)
	}
	switch {
	case g.phase == 0 && g.below() == g.limit:
		// At 1: nothing below to compare with; grow if the limit held requests back.
		if w.demand {
			g.move(1)
		}
	case g.phase < 2:
		g.phase++
		if g.phase == 1 {
			g.lo = g.below()
		}
	default:
		g.phase = 0
		g.decide()
	}
}

// decide moves the limit by what the three windows measured.
func (g *gradient) decide() {
	a, lo, b := g.w[0], g.w[1], g.w[2]
	lower := g.lo // the lower window's limit
	upN, upS := (a.n+b.n)/2, (a.s+b.s)/2
	r := upN / lo.n
	if !(lo.n > 0 && lo.s > 0 && a.s > 0 && b.s > 0) || r < 1.02 || lo.n < 0.9*float64(lower) || max(a.s, b.s) > 1.25*min(a.s, b.s) {
		// The load, not the limit, set the concurrency (in the lower window
		// too: a lull in the arrivals is no measure of the limit); or the
		// handler changed speed across the windows. Nothing learned (a wide
		// lower window stays wide: it has measured nothing yet).
		g.keep(g.wide)
		g.calm = 0
		return
	}
	wide := g.wide
	g.wide = false
	e := math.Log(upS/lo.s) / math.Log(r)
	if g.first {
		g.decideFirst(e, a.demand || b.demand)
		return
	}
	trend := max(a.s, b.s) > 1.1*min(a.s, b.s)
	// fast: the lower window ran at the handler's unloaded speed (within a tenth
	// of the last lower window found below the knee), so it was not above the
	// knee; the knee is then where Little's law places the upper windows'
	// throughput at that speed.
	atBase := g.base > 0 && lo.s <= 1.1*g.base
	fast := atBase && !trend
	little := upN / upS * g.base
	switch {
	case e < g.cfg.Tolerance && !trend:
		g.base = lo.s // the extra concurrency bought throughput: below the knee
	case fast:
		g.base = min(g.base, lo.s)
	}
	if g.over && g.recheck && g.limit-lower > max(g.limit/8, 1) {
		if !trend { // else check again in the next round
			g.decideRecheck(e, r, lo.n, lower, a.demand || b.demand, fast, little)
		}
		return
	}
	switch {
	case e >= g.cfg.Tolerance && g.run > 0:
		// The last move was up, and it bought nothing: the limit before it did
		// (it grew because it did), so the knee is there, and a step above it is
		// the headroom that keeps the handler full while a request is handed a
		// freed slot. Keep the limit a step above the last one that bought (back
		// from a larger grow), and hold it.
		was := g.limit - g.run
		g.run, g.streak = 0, 0
		if g.grewOn >= g.cfg.Tolerance/2 {
			// The grow was on weak evidence: the limit before it may be at the
			// knee's step above already. Back to it, and ask again.
			g.limit = was
			return
		}
		if g.cfg.Headroom > 0 {
			// The knee is below was by the headroom if the grow probed a
			// headroom, and where Little's law puts it if the lower window
			// ran at the unloaded speed.
			k := was
			if g.grewOver {
				k = max(was-g.head, 1)
			}
			if fast {
				k = min(k, max(int(math.Round(little)), 1))
			}
			g.limit = min(k+g.headroom(k), g.cfg.Max)
			g.head = g.limit - k
		} else {
			g.limit = min(was+max(was/8, 1), g.limit)
			g.head = g.limit - was
		}
		if !g.over && g.limit == g.overLimit {
			g.holdLonger() // found again where it was
		} else {
			g.overRounds, g.overLeft = 1, 1
		}
		g.over, g.overLimit = true, g.limit
	case e >= g.cfg.Tolerance/2 && g.over:
		// A step above the knee, as intended: hold. (Only a clear gain, under
		// half the tolerance, says the knee rose: one noisy round does not end
		// the hold.) When the hold is up, the next round rechecks the knee.
		g.overLeft--
		g.recheck = g.overLeft <= 0
		if g.recheck && fast {
			// The lower window, at the knee, ran at the unloaded speed: the
			// knee is no lower, and a recheck below it would cost a window of
			// throughput to learn that. Hold twice as long.
			g.recheck = false
			g.holdLonger()
		}
		g.run, g.streak = 0, 0
		g.calm++
	case e >= g.cfg.Tolerance || (e >= g.cfg.Tolerance/2 && g.limit-lower > max(g.limit/8, 1)):
		// The lower window kept the throughput, or (wider than a step) part
		// of it: fall to where the knee is, read from the throughput the two
		// measured (n^(1-e) grows as the throughput does; below the knee it
		// grows as n), at least a step and at most to the lower window. After a
		// fall all the way, the next lower window goes twice as far.
		if fast {
			// The lower window was at the knee, not above it: settle a step
			// above the knee, without a wider window below it.
			g.settle(little)
			return
		}
		knee := lo.n * math.Pow(r, 1-e)
		g.fall(min(max(int(math.Round(knee)), lower), g.limit-max(g.limit/8, 1)), lower)
		if atBase {
			// The upper windows changed speed, so Little's law cannot place
			// the knee, but the lower one ran at the unloaded speed: the
			// knee is not below it, and the next lower window goes no wider.
			g.wide = false
		}
	case trend:
		// Below the tolerance, but the handler changed speed across the round
		// (by less than the 25% that voids it): a trend the mean of the upper
		// windows cancels only roughly, and a grow on it would be a guess.
		g.keep(wide)
		g.calm = 0
	case a.demand || b.demand:
		// One up from the steady state is a probe, which stays calm until a
		// second grow confirms it.
		probe := g.run <= 0 && g.calm > 0
		g.grewOver = g.over
		g.move(1)
		g.over, g.grewOn = false, e
		if !probe {
			g.calm = 0
		}
	default:
		g.keep(wide)
		g.calm++
	}
}

// keep keeps the limit after a round that learned nothing about the knee below it;
// a lower window that was to go wide still does.
func (g *gradient) keep(wide bool) {
	g.streak = 0
	if g.wide = wide; !wide {
		g.run = 0
	}
}

// decideRecheck decides a round that rechecked the headroom: its lower window ran
// two steps below the limit, a step below the knee, so the throughput the two
// windows measured places the knee (e, r: the elasticity and the ratio of the
// handlers in flight; n the lower window's, at its limit lower) without leaving
// the headroom. demand: the limit held requests back; fast: the lower window ran
// at the unloaded speed, little the knee Little's law places at it.
func (g *gradient) decideRecheck(e, r, n float64, lower int, demand, fast bool, little float64) {
	g.recheck = false
	step := max(g.limit/8, 1)
	knee := int(math.Round(n * math.Pow(r, 1-e)))
	if g.cfg.Headroom > 0 {
		// The knee the headroom sat on, and a step either side of it.
		was := g.limit - g.head
		kstep := max(was/8, 1)
		switch {
		case knee >= was+kstep:
			// The knee rose (as far as the upper windows could show, up to
			// the limit): the headroom goes above it at once.
			k := min(knee, g.limit)
			g.limit = min(k+g.headroom(k), g.cfg.Max)
			g.head, g.overLimit = g.limit-k, g.limit
			g.overRounds, g.overLeft = 1, 1
			g.run, g.streak, g.calm = 0, 0, 0
			return
		case knee > was-kstep:
			g.holdLonger()
			g.run, g.streak = 0, 0
			g.calm++
			return
		}
		// Lower: as below.
	}
	switch {
	case e < g.cfg.Tolerance/2 && demand:
		// The knee rose above the limit: learn again from here.
		g.grewOver, g.over = true, false
		g.move(1)
		g.grewOn = e
		g.calm = 0
	case knee >= g.limit-step:
		// The knee is where it was: hold the headroom, twice as long.
		g.holdLonger()
		g.run, g.streak = 0, 0
		g.calm++
	case fast:
		// The knee fell, and the lower window was not above it: settle a step
		// above it.
		g.settle(little)
	default:
		// The knee fell: fall to it; all the way down, the next lower window
		// goes twice as far.
		g.fall(max(knee, lower), lower)
	}
}

// holdLonger holds the headroom again, for twice as many rounds as the last hold
// (at most overMax): the knee was found where it was.
func (g *gradient) holdLonger() {
	g.overRounds = min(2*g.overRounds, overMax)
	g.overLeft = g.overRounds
}

// settle moves the limit, down, to a step above knee (at least Min) and holds it
// there as a headroom, rechecked after a round.
func (g *gradient) settle(knee float64) {
	k := max(int(math.Round(knee)), 1)
	to := min(max(k+max(k/8, 1), g.cfg.Min), g.limit)
	if g.cfg.Headroom > 0 {
		k = min(k, g.limit)
		to = min(max(k+g.headroom(k), g.cfg.Min), g.cfg.Max)
	}
	g.head = max(to-k, 0)
	g.calm, g.wide, g.streak = 0, false, 0
	g.run, g.limit = min(to-g.limit, 0), to // up (a headroom wider than the fall) is no grow
	g.over, g.recheck, g.overLimit, g.overRounds, g.overLeft = true, false, to, 1, 1
	g.ref = 0
}

// headroom is the headroom asked for above a knee k (Headroom > 0).
func (g *gradient) headroom(k int) int {
	return max(int(math.Ceil(float64(k)*g.cfg.Headroom)), 1)
}

// fall moves the limit down to to (at least Min), from a round whose lower window
// ran at lower: a fall all the way to it, or within a quarter of the way, makes
// the next lower window wide (the knee is likely lower still).
func (g *gradient) fall(to, lower int) {
	to = max(to, g.cfg.Min)
	g.calm, g.wide = 0, to < g.limit && 4*(to-lower) <= g.limit-lower
	g.run, g.streak = to-g.limit, 1
	g.limit, g.over = to, false
}

// decideFirst is the rule before the steady state (benchknob.FirstAdaptiveLimit).
func (g *gradient) decideFirst(e float64, demand bool) {
	switch {
	case e >= g.cfg.Tolerance:
		g.move(-1)
	case demand:
		g.move(1)
	default:
		g.run, g.streak = 0, 0
	}
}

// move changes the limit one way (dir ±1): by an eighth of it (at least 1); from the
// third move in a row the same way on, by twice the last; at most a quarter of the
// limit down and half of it up. (The rule falls to its lower window; only the first
// rule falls by move.)
func (g *gradient) move(dir int) {
	size, streak := g.step(dir)
	g.streak, g.wide = streak, false
	g.limit = min(max(g.limit+dir*size, g.cfg.Min), g.cfg.Max)
	g.run = dir * size
}

// step is the size of the next move one way (dir ±1), and the streak it makes.
func (g *gradient) step(dir int) (size, streak int) {
	size, streak = max(g.limit/8, 1), 1
	if g.run*dir > 0 {
		streak = g.streak + 1
	}
	if streak > 2 {
		size = max(size, 2*g.run*dir)
	}
	if dir < 0 {
		size = min(size, max(g.limit/4, 1))
	} else {
		size = min(size, max(g.limit/2, 1))
	}
	return size, streak
}
