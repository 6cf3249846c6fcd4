package shortcircuit

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/quantile"
	"github.com/deadlinekit/deadlinekit/internal/record"
)

// ErrInsufficientBudget is the sentinel for a budget that cannot pay for the work. It
// is the same value as [deadline.ErrInsufficientBudget]; match it with [errors.Is].
var ErrInsufficientBudget = deadline.ErrInsufficientBudget

// BudgetError reports that the time left (Remaining) is less than the time the next
// step needs (Needed). It is [deadline.BudgetError].
type BudgetError = deadline.BudgetError

// Check returns a [*BudgetError] when ctx has a deadline and less than need is left
// before it (always when the deadline has passed), else nil. Use it inside a handler
// before an expensive step:
//
//	if err := shortcircuit.Check(ctx, 20*time.Millisecond); err != nil {
//		return nil, err // the gRPC interceptors answer DeadlineExceeded
//	}
func Check(ctx context.Context, need time.Duration) error {
	return deadline.Check(ctx, need)
}

// Admission is what the guard did with a request.
type Admission uint8

const (
	// Admitted: the handler ran.
	Admitted Admission = iota
	// BelowFloor: refused, the time left was below the floor.
	BelowFloor
	// Expired: refused, the deadline had passed when the request reached the guard.
	Expired
	// CannotFinish: refused on arrival by the concurrency limit: the predicted wait
	// plus the service time exceeded the time left. With a slot free (no wait),
	// only for a route without a learned floor in force: a learned floor refuses
	// by itself (BelowFloor).
	CannotFinish
	// Dropped: refused on leaving the queue: the time left could no longer pay for
	// the service time.
	Dropped
	// Overloaded: refused, the queue was full (or the request was evicted from it
	// for a newcomer the queue's order serves first); the caller may come back after
	// the predicted wait.
	Overloaded
	// Canceled: the caller cancelled while the request was queued.
	Canceled
)

var decisionNames = [...]string{Admitted: "admitted", BelowFloor: "below_floor", Expired: "expired",
	CannotFinish: "cannot_finish", Dropped: "dropped", Overloaded: "overloaded", Canceled: "canceled"}

// String returns "admitted", "below_floor", "expired", "cannot_finish", "dropped",
// "overloaded" or "canceled".
func (d Admission) String() string {
	if int(d) < len(decisionNames) {
		return decisionNames[d]
	}
	return "unknown"
}

// Refused reports whether the handler was not run.
func (d Admission) Refused() bool { return d != Admitted }

// Event describes one request seen by the guard. It holds no reference to the request.
type Event struct {
	// Route is the route key: the gRPC full method, or the HTTP Pattern or path.
	Route     string
	Admission Admission
	// HasDeadline is false for a request without deadline; Remaining, Floor and
	// Overrun are then zero.
	HasDeadline bool
	// Remaining is the time that was left when the request reached the guard
	// (zero or negative when it arrived past its deadline).
	Remaining time.Duration
	// Floor is the floor in force for the request.
	Floor time.Duration
	// Queued is true when the request waited for a slot of the concurrency limit;
	// Wait is how long (for a refusal on arrival, Overloaded or CannotFinish, the
	// wait that was predicted).
	Queued bool
	Wait   time.Duration
	// Duration is how long the handler ran; zero for a refused request.
	Duration time.Duration
	// Overrun is how long the handler kept running after the deadline on its
	// context had passed (for gRPC the server's own, arrival + grpc-timeout, a little
	// after the client's): work nobody was waiting for. Zero when it finished in
	// time, and for a refused request.
	Overrun time.Duration
	// Deduplicated is true for an admitted request that the deduplication beneath
	// the guard (package dedup) answered without running the handler: a replay of
	// a stored answer, a repeat that waited for the first request with its key, or
	// dedup's refusal of a repeat. It is no handler work: it held its slot only
	// until dedup knew, taught no floor and no service time, and Duration, Overrun
	// and Success are zero.
	Deduplicated bool
	// Success is whether the call succeeded (gRPC: the handler returned nil; HTTP:
	// the status was below 500). For HTTP the status is noted only for a route that
	// has an adaptive window; Success is reported true otherwise. False for a refused
	// request.
	Success bool
}

// Counter keeps the totals of the events it observes: pass its Observe method to
// [WithObserver]. Its zero value is ready; it is safe for
// concurrent use. One Counter may observe several guards.
type Counter struct {
	admitted, deduplicated                      atomic.Uint64
	belowFloor, expired, overruns               atomic.Uint64
	cannotFinish, dropped, overloaded, canceled atomic.Uint64
	queued                                      atomic.Uint64
	overrun, maxOverrun                         atomic.Int64
}

// Stats is a snapshot of a [Counter].
type Stats struct {
	Admitted uint64 // requests whose handler ran
	// Deduplicated counts the admitted requests that dedup answered without the
	// handler ([Event].Deduplicated); they are not in Admitted.
	Deduplicated uint64
	BelowFloor   uint64 // refused: time left below the floor
	Expired      uint64 // refused: deadline passed on arrival
	// Refusals of the concurrency limit (see [Admission]).
	CannotFinish, Dropped, Overloaded, Canceled uint64
	// Queued counts the requests that waited for a slot, admitted or not.
	Queued uint64
	// Overruns is the number of admitted requests whose handler was still running
	// when the deadline passed; Overrun is their total time past it, MaxOverrun the
	// longest.
	Overruns   uint64
	Overrun    time.Duration
	MaxOverrun time.Duration
}

// Refused returns the number of refused requests.
func (s Stats) Refused() uint64 {
	return s.BelowFloor + s.Expired + s.CannotFinish + s.Dropped + s.Overloaded + s.Canceled
}

// Observe counts e.
func (c *Counter) Observe(_ context.Context, e Event) {
	switch e.Admission {
	case Admitted:
		if e.Deduplicated {
			c.deduplicated.Add(1)
		} else {
			c.admitted.Add(1)
		}
	case BelowFloor:
		c.belowFloor.Add(1)
	case Expired:
		c.expired.Add(1)
	case CannotFinish:
		c.cannotFinish.Add(1)
	case Dropped:
		c.dropped.Add(1)
	case Overloaded:
		c.overloaded.Add(1)
	case Canceled:
		c.canceled.Add(1)
	}
	if e.Queued {
		c.queued.Add(1)
	}
	if e.Overrun > 0 {
		c.overruns.Add(1)
		c.overrun.Add(int64(e.Overrun))
		for {
			m := c.maxOverrun.Load()
			if int64(e.Overrun) <= m || c.maxOverrun.CompareAndSwap(m, int64(e.Overrun)) {
				break
			}
		}
	}
}

// Stats returns the totals so far. Fields are read one by one, so a snapshot taken
// while requests run may be off by the requests in flight.
func (c *Counter) Stats() Stats {
	return Stats{
		Admitted:     c.admitted.Load(),
		Deduplicated: c.deduplicated.Load(),
		BelowFloor:   c.belowFloor.Load(),
		Expired:      c.expired.Load(),
		CannotFinish: c.cannotFinish.Load(),
		Dropped:      c.dropped.Load(),
		Overloaded:   c.overloaded.Load(),
		Canceled:     c.canceled.Load(),
		Queued:       c.queued.Load(),
		Overruns:     c.overruns.Load(),
		Overrun:      time.Duration(c.overrun.Load()),
		MaxOverrun:   time.Duration(c.maxOverrun.Load()),
	}
}

// guard is the protocol-free core shared by the adapters.
type guard struct {
	floor      time.Duration
	floorFunc  func(string) time.Duration
	observers  []func(context.Context, Event)
	adaptive   *quantile.Keyed[string] // nil without an adaptive floor
	minSamples int
	min, max   time.Duration
	measure    bool     // the handler's end must be timed (adaptive floor, limit or observers)
	lim        *limiter // nil without a concurrency limit
}

func newGuard(opts []Option) *guard {
	c := newConfig(opts)
	g := &guard{
		floor:     c.floor,
		floorFunc: c.floorFunc,
		observers: c.observers,
	}
	if a := c.adaptive; a != nil {
		g.adaptive = quantile.NewKeyed[string](quantile.Config{
			Length:   a.Window,
			Buckets:  a.Buckets,
			Quantile: a.Quantile,
			MaxKeys:  a.MaxRoutes,
		})
		g.minSamples, g.min, g.max = a.MinSamples, a.Min, a.Max
	}
	if c.maxConcurrency > 0 || c.adaptiveLimit != nil {
		g.lim = newLimiter(&c)
	}
	g.measure = g.adaptive != nil || len(g.observers) > 0 || g.lim != nil
	return g
}

// ticket carries one request from admit to done. It lives on the adapter's stack.
type ticket struct {
	route    string
	start    time.Time
	deadline time.Time
	has      bool
	left     time.Duration
	floor    time.Duration
	learned  bool // the route's learned floor is in force
	win      *quantile.Window
	decision Admission
	entry    entry // the concurrency limit's decision
	released bool  // done ran, or idle: the slot, if any, is given back
	// idle: a layer beneath (dedup) answers the request without the handler; it
	// teaches nothing, and done only reports it (see work.go).
	idle bool
}

// admit decides whether the handler may run, filling t. It reports true to run it.
// With a concurrency limit it may wait for a slot.
func (g *guard) admit(ctx context.Context, route string, t *ticket) bool {
	t.route = route
	t.deadline, t.has = ctx.Deadline()
	if !t.has && !g.measure {
		return true
	}
	if g.measure {
		t.start = time.Now()
	}
	if g.adaptive != nil {
		t.win = g.adaptive.Window(route)
	}
	if t.has {
		if g.measure {
			t.left = t.deadline.Sub(t.start)
		} else {
			// Nothing is timed: the monotonic clock alone, half the price of time.Now.
			t.left = time.Until(t.deadline)
		}
		floor := g.floor
		if g.floorFunc != nil {
			floor = max(floor, g.floorFunc(route))
		}
		if t.win != nil {
			if v, n := t.win.Tracked(t.start); n >= g.minSamples {
				floor = max(floor, min(max(binLow(v), g.min), g.max))
				t.learned = true
			}
		}
		t.floor = floor
		switch {
		case t.left <= 0:
			t.decision = Expired
		case t.left < floor:
			t.decision = BelowFloor
		}
		if t.decision != Admitted {
			record.Guard(ctx, t.left, floor)
			g.observe(ctx, t)
			return false
		}
	}
	if g.lim == nil {
		return true
	}
	t.entry = g.lim.acquire(ctx, t.start, t.deadline, t.has, t.learned)
	t.decision = t.entry.decision
	record.Admission(ctx, t.decision.String(), t.entry.queued, t.entry.wait, t.entry.service, t.left, t.has, t.displacedBy())
	if t.decision != Admitted {
		g.observe(ctx, t)
		return false
	}
	if t.entry.queued {
		t.start = time.Now() // the handler's duration starts with its slot
	}
	return true
}

// binLow is the least duration that v, a quantile read from a window of package
// internal/quantile, stands for. The window keeps durations in bins at most a
// sixteenth of their low edge wide, and answers with a bin's middle, which may be
// above every duration in it: a floor there would refuse a request with as much
// time left as the handler took. v·32/33 is at or below the bin's low edge.
func binLow(v time.Duration) time.Duration { return v - v/33 }

// observe reports a refused request to the observers.
func (g *guard) observe(ctx context.Context, t *ticket) {
	for _, o := range g.observers {
		o(ctx, Event{
			Route:       t.route,
			Admission:   t.decision,
			HasDeadline: t.has,
			Remaining:   t.left,
			Floor:       t.floor,
			Queued:      t.entry.queued,
			Wait:        t.entry.wait,
		})
	}
}

// done records the end of an admitted request's handler. ok is whether the call
// succeeded.
func (g *guard) done(ctx context.Context, t *ticket, ok bool) {
	if t.idle {
		g.doneIdle(ctx, t)
		return
	}
	var end time.Time
	var over time.Duration
	if t.has {
		// Only a context that has ended can have been overrun: the clock is read
		// here only then, or when the duration is wanted below.
		if g.measure || ctx.Err() != nil {
			end = time.Now()
			if end.After(t.deadline) {
				over = end.Sub(t.deadline)
			}
		}
		record.Overrun(ctx, over)
	}
	if !g.measure {
		return
	}
	if end.IsZero() {
		end = time.Now()
	}
	took := end.Sub(t.start)
	if g.lim != nil {
		t.released = true
		g.lim.releaseAt(t.entry.slot, end, max(took, 1))
	}
	if ok && t.win != nil && ctx.Err() == nil {
		// A handler whose context ended (its deadline passed, its caller left) ran
		// as long as it was let: that is the budget it got, not its service time.
		t.win.Add(end, took)
	}
	if len(g.observers) == 0 {
		return
	}
	e := Event{
		Route:       t.route,
		Admission:   Admitted,
		HasDeadline: t.has,
		Remaining:   t.left,
		Floor:       t.floor,
		Duration:    took,
		Overrun:     over,
		Success:     ok,
		Queued:      t.entry.queued,
		Wait:        t.entry.wait,
	}
	for _, o := range g.observers {
		o(ctx, e)
	}
}

// comeBack is, for an Overloaded refusal, when to come back: the predicted wait,
// at least a millisecond. ok is false for every other refusal: do not retry.
func (t *ticket) comeBack() (d time.Duration, ok bool) {
	if t.decision != Overloaded {
		return 0, false
	}
	return max(t.entry.wait, time.Millisecond), true
}

// displacedBy is, for a request whose queue place a newcomer took, the newcomer's
// level; "" otherwise.
func (t *ticket) displacedBy() string {
	if !t.entry.displaced {
		return ""
	}
	return t.entry.by.String()
}

// releaseOnPanic gives back the slot of an admitted request whose handler panicked
// (done did not run); the panic goes on.
func (g *guard) releaseOnPanic(t *ticket) {
	if !t.released && t.decision == Admitted {
		g.lim.release(t.entry.slot, 0)
	}
}

// refusal is the message sent with a refusal.
func (t *ticket) refusal() string {
	e := &t.entry
	switch t.decision {
	case Expired:
		return "shortcircuit: deadline passed " + deadline.Format(-t.left) + " ago: request refused before the handler ran"
	case CannotFinish:
		return "shortcircuit: cannot finish in time: " + deadline.Format(t.left) + " left, every slot taken: a wait of " +
			deadline.Format(e.wait) + " predicted, then " + deadline.Format(e.service) + " of work: request refused before the handler ran"
	case Dropped:
		return "shortcircuit: cannot finish in time: after " + deadline.Format(e.wait) + " in the queue, " +
			deadline.Format(t.left-e.wait) + " left for " + deadline.Format(e.service) + " of work: request refused before the handler ran"
	case Overloaded:
		d, _ := t.comeBack()
		if e.displaced {
			return "shortcircuit: overloaded: its place in the queue taken by a " + e.by.String() + " request; come back in " +
				deadline.Format(d) + " (the predicted wait): request refused before the handler ran"
		}
		return "shortcircuit: overloaded: every slot taken and the queue full; come back in " + deadline.Format(d) +
			" (the predicted wait): request refused before the handler ran"
	case Canceled:
		return "shortcircuit: the caller cancelled after " + deadline.Format(e.wait) + " in the queue"
	}
	return "shortcircuit: " + deadline.Format(t.left) + " left, floor " + deadline.Format(t.floor) + ": request refused before the handler ran"
}
