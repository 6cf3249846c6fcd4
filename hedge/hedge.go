package hedge

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/attempts"
	"github.com/deadlinekit/deadlinekit/internal/quantile"
	"github.com/deadlinekit/deadlinekit/internal/record"
)

// Hedger holds the state of a hedging layer: the latency window of each target (a
// host for HTTP, a full method for gRPC), the token account that caps hedges, and the
// statistics. [NewTransport] and [UnaryClientInterceptor] each make one of their own;
// make one with [New] to share it between adapters and to read its [Hedger.Stats].
// Its methods and the adapters it makes are safe for concurrent use; the zero Hedger
// is not usable. It keeps state for at most 1024 targets: calls to targets beyond
// them are hedged only after [Delay.Initial], and a gRPC method's descriptor is then
// looked up per call.
//
// The first answer wins, whichever copy gives it; a failure ends the call only when no
// other copy is left, and when every copy has failed the call returns the failure
// that came last. A hedge refused for lack of budget leaves the call to the primary
// and sends no further hedge: one sent later would have even less time. What is an
// answer, a failure or a refusal is the adapters' to say ([Hedger.Transport],
// [Hedger.UnaryClientInterceptor]). The copies still running when the call is
// decided are cancelled.
//
// No goroutine runs between calls. Within a call, the primary runs on the caller's
// goroutine, so a call that answers before the delay starts none; each hedge runs on
// a goroutine of its own, which ends when its attempt returns (at once, once
// cancelled) or, for an HTTP loser that had an answer, once its body is drained. A
// panic in an attempt of a hedged call is returned as the attempt's error.
//
// Package otelattr records each call: the layer joins the call's span
// ([record.StartCall]) or starts one; each attempt of a hedgeable call gets a child
// span, ended before the call's (a copy still in flight when the call is decided ends
// "canceled"); the call's span gets the hedges sent and whether one won, or why none
// was sent (deadlinekit.hedge.skip, a [Skip]). Beside the spans, each hedge sent
// counts once its call ends in the metric deadlinekit.hedge.outcomes, by target
// (deadlinekit.hedge.target) and outcome (deadlinekit.hedge.outcome): won, when its
// success was the call's answer, else wasted; their sum is the hedges sent.
type Hedger struct {
	cfg          *config
	windowConfig quantile.Config
	targets      atomic.Pointer[map[string]*target] // copy-on-write, at most maxTargets
	targetsMu    sync.Mutex
	tokens       *tokens
	// others records the hedges to targets beyond maxTargets.
	others *record.HedgeTarget

	primaries, hedges, wins, refusedCap, refusedDeadline    atomic.Uint64
	notIdempotent, notReplayable, coveredCalls, keyedWrites atomic.Uint64
}

// target is what a Hedger knows of one target. One lookup per call finds it.
type target struct {
	// idempotent: the gRPC method is declared idempotent, by option or in its
	// descriptor.
	idempotent bool
	window     atomic.Pointer[quantile.Window] // made by the first hedgeable call
	rec        *record.HedgeTarget             // its hedges, won or wasted
}

// targetKind says what names a target, and so whether its idempotency is declared.
type targetKind uint8

const (
	httpHost   targetKind = iota
	grpcMethod            // idempotent by option or descriptor, looked up once
)

// New returns a Hedger configured by opts.
func New(opts ...Option) *Hedger {
	c := newConfig(opts)
	return &Hedger{
		cfg:          c,
		windowConfig: quantile.Config{Length: c.delay.Window, Buckets: c.delay.Buckets, Quantile: c.percentile},
		tokens:       newTokens(c.maxExtraLoad, c.hedgesAtOnce()),
		others:       record.NewHedgeTarget("other"),
	}
}

// Stats is a snapshot of a [Hedger]'s counters, each counted since it was made.
type Stats struct {
	// Primaries is the number of calls that could be hedged: idempotent (and
	// replayable) calls, and keyed writes under [WithKeyedWrites], each sent once as
	// a primary.
	Primaries uint64
	// Hedges is the number of hedges sent. A hedge whose body could not be replayed
	// was not sent, and is not counted; one refused by a layer beneath (propagate's
	// floor) or by the server is.
	Hedges uint64
	// HedgeWins is the number of calls whose result is a hedge's success. A call
	// whose copies all failed is no win, whichever failure it returned.
	HedgeWins uint64
	// RefusedByCap is the number of calls whose hedge, when due, was not sent
	// because the token account was empty ([WithMaxExtraLoad]). Such a call tries
	// again after each further delay, and may send its hedge later.
	RefusedByCap uint64
	// RefusedByDeadline is the number of hedges not sent because less than the floor
	// was left before the call's deadline ([WithFloor]).
	RefusedByDeadline uint64
	// NotIdempotent is the number of calls sent once because they are not
	// idempotent.
	NotIdempotent uint64
	// NotReplayable is the number of idempotent HTTP calls sent once because their
	// body cannot be replayed (no GetBody), and of gRPC calls whose reply is not a
	// proto.Message.
	NotReplayable uint64
	// Covered is the number of idempotent calls sent once by the chain rule: the
	// request they serve is one a layer above may send again (see the package
	// documentation).
	Covered uint64
	// KeyedWrites is the number of writes with an idempotency key sent once because
	// keyed writes are not hedged without [WithKeyedWrites].
	KeyedWrites uint64
	// Tokens is the balance of the token account: how many hedges may go out now.
	Tokens float64
}

// Stats returns the current counters.
func (h *Hedger) Stats() Stats {
	return Stats{
		Primaries:         h.primaries.Load(),
		Hedges:            h.hedges.Load(),
		HedgeWins:         h.wins.Load(),
		RefusedByCap:      h.refusedCap.Load(),
		RefusedByDeadline: h.refusedDeadline.Load(),
		NotIdempotent:     h.notIdempotent.Load(),
		NotReplayable:     h.notReplayable.Load(),
		Covered:           h.coveredCalls.Load(),
		KeyedWrites:       h.keyedWrites.Load(),
		Tokens:            h.tokens.value(),
	}
}

// Delay returns the current hedge delay of target (a host, "example.com:443", for
// HTTP; a full method, "/pkg.Service/Method", for gRPC), and false when calls to it
// are not hedged yet: too few latencies in its window and no [Delay.Initial].
func (h *Hedger) Delay(target string) (time.Duration, bool) {
	if m := h.targets.Load(); m != nil {
		if t, ok := (*m)[target]; ok {
			return h.delay(t.window.Load(), time.Now())
		}
	}
	return h.delay(nil, time.Now())
}

// Delays returns the current hedge delay of every target seen, leaving out those not
// hedged yet.
func (h *Hedger) Delays() map[string]time.Duration {
	out := map[string]time.Duration{}
	m := h.targets.Load()
	if m == nil {
		return out
	}
	now := time.Now()
	for name, t := range *m {
		if w := t.window.Load(); w != nil {
			if d, ok := h.delay(w, now); ok {
				out[name] = d
			}
		}
	}
	return out
}

// target returns what h knows of the target name, making it when it is new; nil
// when maxTargets targets are known already.
func (h *Hedger) target(name string, kind targetKind) *target {
	if m := h.targets.Load(); m != nil {
		if t, ok := (*m)[name]; ok {
			return t
		}
	}
	h.targetsMu.Lock()
	defer h.targetsMu.Unlock()
	old := h.targets.Load()
	n := 0
	if old != nil {
		if t, ok := (*old)[name]; ok {
			return t
		}
		n = len(*old)
	}
	if n >= maxTargets {
		return nil
	}
	t := &target{rec: record.NewHedgeTarget(name)}
	if kind == grpcMethod {
		t.idempotent = h.declaredIdempotent(name)
	}
	m := make(map[string]*target, n+1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[name] = t
	h.targets.Store(&m)
	return t
}

// window returns the latency window of t, making it on first use; nil for a nil t.
func (h *Hedger) window(t *target) *quantile.Window {
	if t == nil {
		return nil
	}
	if w := t.window.Load(); w != nil {
		return w
	}
	t.window.CompareAndSwap(nil, quantile.New(h.windowConfig))
	return t.window.Load()
}

// delay returns the hedge delay from window w, or false when calls are not hedged.
func (h *Hedger) delay(w *quantile.Window, now time.Time) (time.Duration, bool) {
	cfg := h.cfg.delay
	var d time.Duration
	n := 0
	if w != nil {
		d, n = w.Tracked(now)
	}
	if n < cfg.MinSamples {
		if cfg.Initial <= 0 {
			return 0, false
		}
		d = cfg.Initial
	}
	d = max(d, cfg.Min)
	if cfg.Max > 0 {
		d = min(d, cfg.Max)
	}
	return d, true
}

// covered reports whether the calls made under ctx are not hedged by the chain rule:
// the request ctx serves is one a layer above may send again.
func (h *Hedger) covered(ctx context.Context) bool {
	return !h.cfg.noChainRule && attempts.Covered(ctx)
}

// marks reports whether a call that is hedgeable (or covered) carries the chain
// rule's mark to the downstream.
func (h *Hedger) marks() bool { return !h.cfg.noChainRule && !h.cfg.disabled() }

// plan is how a hedgeable call goes out.
type plan struct {
	window *quantile.Window // nil when h knows too many targets
	rec    *record.HedgeTarget
	start  time.Time
	delay  time.Duration
	// skip is why the call is sent once, without a hedge; "" when it may be hedged.
	skip Skip
}

// plan counts a hedgeable call to t as a primary, pays its share into the token
// account and finds its delay.
func (h *Hedger) plan(t *target) plan {
	h.primaries.Add(1)
	h.tokens.pay()
	p := plan{window: h.window(t), rec: h.others, start: time.Now()}
	if t != nil {
		p.rec = t.rec
	}
	var known bool
	p.delay, known = h.delay(p.window, p.start)
	switch {
	case h.cfg.disabled():
		p.skip = SkipDisabled
	case !known:
		p.skip = SkipWarmingUp
	}
	return p
}

// learnCovered feeds t's window with the latency of a call the chain rule sent once
// (started at start), which has just succeeded: the hop hedges its calls when it
// serves the last copy of a call from above, and must know their latency then.
func (h *Hedger) learnCovered(t *target, start time.Time) {
	if w := h.window(t); w != nil {
		end := time.Now()
		w.Add(end, end.Sub(start))
	}
}

// learnLatency feeds the window with the latency of a call sent once, which has
// just succeeded.
func (p *plan) learnLatency() {
	if p.window != nil {
		end := time.Now()
		p.window.Add(end, end.Sub(p.start))
	}
}

// allow decides whether a hedge may go out now and takes its token; the hedge is
// counted in [Stats] once it is sent. waited: the cap refused this call's hedge
// before, and Stats counts a call once.
func (h *Hedger) allow(ctx context.Context, e *Event, waited bool) bool {
	if left, has := deadline.Remaining(ctx); has && left < h.cfg.floor {
		h.refusedDeadline.Add(1)
		e.Skipped = SkipDeadline
		return false
	}
	if !h.tokens.take() {
		if !waited {
			h.refusedCap.Add(1)
		}
		e.Skipped = SkipCap
		return false
	}
	return true
}

// Event describes one call, for an observer ([WithObserver]).
type Event struct {
	// Target is the host (HTTP) or full method (gRPC) of the call.
	Target string
	// Attempts is the number of copies of the call sent: 1 when it was not hedged. A
	// hedge that could not be sent (its body could not be replayed) is not counted.
	Attempts int
	// Winner is the index of the attempt whose answer (or failure) was returned: 0
	// for the primary, 1 for the first hedge; -1 when none was (the caller gave up).
	Winner int
	// Delay is the hedge delay the call was given; zero when it could not be hedged.
	Delay time.Duration
	// Skipped says why a hedge that was due was not sent, or why the call could not
	// be hedged at all (a body that cannot be replayed counts as not idempotent);
	// empty when nothing was held back, even when the call ended before its hedge
	// was due (which its span records as not_due).
	Skipped Skip
}

// observe calls the observers with e, in order, on the caller's goroutine.
func (h *Hedger) observe(ctx context.Context, e *Event) {
	for _, f := range h.cfg.observers {
		f(ctx, *e)
	}
}

// recordSentOnce records on the call's span a call sent without a hedge, for the
// reason e.Skipped.
func recordSentOnce(ctx context.Context, e *Event) {
	record.HedgeCall(ctx, 0, false, record.HedgeSkip(e.Skipped))
}
