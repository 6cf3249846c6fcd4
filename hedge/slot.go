package hedge

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deadlinekit/deadlinekit/internal/record"
)

// A hedgeable gRPC call starts in a slot: the primary's context, its span and the
// hedge's timer, and what a hedge would need, with none of a full call's state
// (its lock, its copies' arrays, its pooled memory to clear). Most calls answer
// before their hedge is due, and end there. When the timer fires first, or the
// primary fails in a way that sends the next hedge at once, the call is taken over:
// a full call (grpcCall) is made with the primary as its copy 0, and goes on as
// one that started full would. Behaviour is the same either way
// (TestSlotAndFullCallAgree); the slot saves the full call's bookkeeping on every
// call whose hedge is never sent.
//
// Calls with an idempotency key, or with grpc.OnFinish callbacks, start full.

// slotEnded is a slot's taken once its primary has ended the call.
var slotEnded = new(grpcCall)

// grpcSlot is a hedgeable gRPC call while only its primary is out.
type grpcSlot struct {
	// taken is nil while the primary is out alone; slotEnded once it returned first
	// and ended the call; else the full call that took the call over. It changes
	// once, from nil.
	taken atomic.Pointer[grpcCall]

	h        *Hedger
	ctx      context.Context // the caller's
	plan     plan
	attempts grpcAttempts
	cancel   context.CancelFunc // the primary's
	span     record.Attempt     // the primary's

	timer *time.Timer
	// fireFunc is s.fire as a func value, bound to the slot, kept with its memory.
	fireFunc func()
}

// grpcSlots keeps the memory of slots whose timer was stopped before it fired: no
// goroutine refers to them any more. Their timer is kept with them when it was made
// outside any testing/synctest bubble (see [grpcCall.release]).
var grpcSlots = sync.Pool{New: func() any { return new(grpcSlot) }}

// slotUnary sends the call a describes, hedged as p says, starting in a slot.
func (h *Hedger) slotUnary(ctx context.Context, p plan, a grpcAttempts) error {
	s := grpcSlots.Get().(*grpcSlot)
	s.h, s.ctx, s.plan, s.attempts = h, ctx, p, a
	primaryCtx, cancel := context.WithCancel(ctx)
	primaryCtx, s.span = record.StartAttempt(primaryCtx, record.GRPC, record.KindPrimary, 1)
	s.cancel = cancel
	s.arm()
	_, err := sendRecovered(primaryCtx, &s.attempts, 0, s.span)
	// The end from the monotonic clock alone: half the price of time.Now.
	r := result[struct{}]{n: 0, err: err, start: p.start, end: p.start.Add(time.Since(p.start))}
	v := s.attempts.verdict(0, struct{}{}, err)
	if v != nonFatal && s.taken.CompareAndSwap(nil, slotEnded) {
		return s.end(r, v)
	}
	// Taken over: by the timer, or here, to send the next hedge at once.
	if v == nonFatal && s.takeOver() {
		s.timer.Stop()
	}
	gc := s.taken.Load()
	won, cancel, ok := gc.call.finish(ctx, r)
	return h.ended(ctx, gc, won, cancel, ok)
}

// arm starts the hedge's timer: a slot's memory reused outside bubbles keeps its
// timer, stopped before it fired, and arms it again.
func (s *grpcSlot) arm() {
	if s.fireFunc == nil {
		s.fireFunc = s.fire
	}
	if s.timer != nil && !inBubble(s.plan.start) {
		s.timer.Reset(s.plan.delay)
		return
	}
	s.timer = time.AfterFunc(s.plan.delay, s.fireFunc)
}

// end ends the call with the primary's result r, judged v, as a full call decided
// by its primary ends it.
func (s *grpcSlot) end(r result[struct{}], v verdict) error {
	stopped := s.timer.Stop()
	endSpan(s.ctx, s.span, v, r.err, func() error { return s.attempts.failure(struct{}{}, r.err) })
	if v == success {
		if w := s.plan.window; w != nil {
			w.Add(r.end, r.end.Sub(r.start))
		}
	}
	s.cancel()
	ctx, h := s.ctx, s.h
	record.HedgeCall(ctx, 0, false, record.HedgeSkip(SkipNotDue))
	if len(h.cfg.observers) > 0 {
		ev := Event{Target: s.attempts.method, Attempts: 1, Winner: 0, Delay: s.plan.delay}
		h.observe(ctx, &ev)
	}
	if stopped {
		s.release()
	}
	return r.err
}

// fire takes the call over when its hedge is due (on the timer's goroutine) and
// sends the hedge.
func (s *grpcSlot) fire() {
	if s.takeOver() {
		s.taken.Load().call.fire()
	}
}

// takeOver makes the full call that goes on with the primary as its copy 0, and
// reports whether it took the call over: false when the primary had ended it, or
// another had taken it.
func (s *grpcSlot) takeOver() bool {
	gc := new(grpcCall) // never pooled: the slot's timer goroutine may still hold it
	gc.attempts = s.attempts
	gc.event = Event{Target: s.attempts.method, Attempts: 1, Delay: s.plan.delay}
	c := &gc.call
	c.callSetup = callSetup[struct{}]{hedger: s.h, protocol: record.GRPC, plan: s.plan, adapter: &gc.attempts, event: &gc.event}
	c.ctx, c.cancels[0], c.copies, c.outstanding = s.ctx, s.cancel, 1, 1
	c.spans[0], c.started[0] = s.span, true
	c.fireFunc, c.takenOver = c.fire, true
	return s.taken.CompareAndSwap(nil, gc)
}

// release zeroes s, keeping its fireFunc and, made outside any testing/synctest
// bubble, its stopped timer, and puts it back.
func (s *grpcSlot) release() {
	fire, timer := s.fireFunc, s.timer
	if inBubble(s.plan.start) {
		timer = nil
	}
	*s = grpcSlot{}
	s.fireFunc, s.timer = fire, timer
	grpcSlots.Put(s)
}
