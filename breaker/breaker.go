package breaker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/internal/quantile"
	"github.com/deadlinekit/deadlinekit/internal/record"
)

// State is a circuit's state.
type State uint8

const (
	// Closed: calls go through and their outcomes are counted.
	Closed State = iota
	// Open: calls are refused with [ErrOpen] until the sleep is over.
	Open
	// HalfOpen: a few probes go through; their outcomes close or reopen the circuit.
	HalfOpen
)

var stateNames = [...]string{Closed: "closed", Open: "open", HalfOpen: "half-open"}

// String returns "closed", "open" or "half-open".
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "unknown"
}

func (s State) otel() record.BreakerState {
	switch s {
	case Open:
		return record.BreakerOpen
	case HalfOpen:
		return record.BreakerHalfOpen
	}
	return record.BreakerClosed
}

// typicalMinSamples is how many latencies a circuit's window must hold before their
// median is trusted as the target's typical latency.
const typicalMinSamples = 10

// denseSamples is the number of latencies below which every success feeds the
// typical-latency window; above, one success in sampleEvery does (adding to it takes
// a lock and a histogram walk, the price of a call through the closed breaker).
const (
	denseSamples = 64
	sampleEvery  = 16
)

// Breaker holds the circuits of a breaking layer, one per target, and its
// statistics. Its methods and the adapters it makes are safe for concurrent use.
// Make one with [New]; the zero Breaker is not usable. It starts no goroutine: a
// circuit changes state on the goroutine of the call that finds the change due
// (the call that trips it, or the first call after its sleep; a gRPC stream's
// outcome, when its caller's context ends first, is counted on the goroutine
// context.AfterFunc starts).
type Breaker struct {
	cfg      *config
	circuits atomic.Pointer[map[key]*circuit] // copy-on-write; at most 4 × MaxTargets keys
	last     atomic.Pointer[hit]              // the circuit found last: most clients call one target
	mu       sync.Mutex                       // serialises additions
	byName   map[string]*circuit              // under mu; at most MaxTargets
	swept    time.Time                        // under mu: the last look for idle circuits (evictIdle)

	refused, probes, untracked         atomic.Uint64
	throttledN                         atomic.Uint64
	successes, failures, neutral, slow atomic.Uint64
	opens                              atomic.Uint64
}

// hit is a circuit with the key it was made for: the lookup's one-entry cache.
type hit struct {
	k key
	c *circuit
}

// key identifies a circuit in the lookup map without building a string per call.
type key struct {
	kind uint8 // keyHTTP, keyGRPC, keyCustom
	a, b string
}

const (
	keyHTTP     uint8 = iota // a: scheme, b: host as in the URL
	keyGRPC                  // b: the ClientConn's target
	keyCustom                // b: WithKey's result
	keyEndpoint              // a: the ClientConn's target, b: an endpoint's address
)

// maxKeys bounds the lookup map: a circuit can be reached by a few spellings of its
// target ("example.com" and "example.com:443").
const maxKeys = 4 * MaxTargets

// New returns a Breaker configured by opts. The adapters it makes
// ([Breaker.Transport], [Breaker.UnaryClientInterceptor],
// [Breaker.StreamClientInterceptor]) share its circuits and statistics.
func New(opts ...Option) *Breaker {
	return &Breaker{cfg: newConfig(opts), byName: map[string]*circuit{}}
}

// circuit is the state of one target's breaker.
type circuit struct {
	name  string
	hit   hit // the key the circuit was made for, and itself
	epoch time.Time
	tel   *record.BreakerTarget
	lat   *quantile.Window // latencies of successes: the target's typical latency
	seen  atomic.Uint32    // successes seen, for sampling them into lat
	thr   *throttle        // the adaptive throttle's counts; nil when it is off
	// endpoints is set while the calls through this target circuit are judged by
	// the circuits of its endpoints (BalancerName): their throttles decide, not its.
	endpoints atomic.Bool
	// used is when (ns since epoch) the circuit last admitted a call, to a second
	// (usedGrain); gone is set when it is dropped for being idle (evictIdle).
	used atomic.Int64
	gone atomic.Bool

	// sg is the state (low 2 bits) and the generation (above), which every change of
	// state increments: an outcome counts only in the generation it was admitted in.
	sg atomic.Uint64
	// until is, while open, the time (ns since epoch) the next probe may go.
	until atomic.Int64

	// shed is when (ns since epoch) the target last refused a call through the
	// circuit in a way that shows it up (upRefusal; for lack of budget, unless the
	// call was starved) or for load (HTTP 429, gRPC RESOURCE_EXHAUSTED), and
	// served[l] when it last served a call of level l (criticality, from
	// Sheddable), to a millisecond (okGrain): a timeout of a call sent before
	// either, of a lower level for served, is not the target's failure
	// (Result.SheddingSince).
	shed   atomic.Int64
	served [levels]atomic.Int64

	// consec is the number of failures since the last success (closed state): the
	// consecutive-failures trip. Failures add to it under mu; successes clear it
	// without the lock.
	consec atomic.Int32

	mu       sync.Mutex
	win      window // its plain successes are counted without mu
	opened   int    // consecutive openings since the circuit was last closed
	sleep    int64  // the current sleep, ns
	inflight int    // half-open: probes sent, not yet back
	passed   int    // half-open: probes that succeeded
	lost     int    // half-open: probes lost (MaxLostProbes) since it left open
	lease    int64  // half-open: the time (ns since epoch) after which probes in flight are given up on
	// open: the calls refused that were told to come back for the probes due at
	// promisedFor (until, ns since epoch), at most the number of probes
	// ([Breaker.promise]).
	promisedFor int64
	promised    int
}

func (b *Breaker) newCircuit(name string) *circuit {
	lat := quantile.New(quantile.Config{Length: b.cfg.window, Buckets: b.cfg.buckets, Quantile: 0.5})
	c := &circuit{
		name:  name,
		epoch: lat.Epoch(), // one time zero for all: the latencies take the circuit's times
		tel:   record.NewBreakerTarget(name),
		lat:   lat,
		win:   newWindow(int64(b.cfg.window), b.cfg.buckets),
	}
	if b.cfg.throttle != nil {
		c.thr = newThrottle(b.cfg.throttle)
	}
	return c
}

func stateOf(sg uint64) State { return State(sg & 3) }

// next returns sg moved to state s, in a new generation.
func next(sg uint64, s State) uint64 { return (sg&^3 + 4) | uint64(s) }

// lookup returns the circuit of k, nil when there is none yet. The circuit found
// last is compared first: a key compares in a few ns, a map lookup hashes it.
func (b *Breaker) lookup(k key) *circuit {
	if h := b.last.Load(); h != nil && h.k == k && !h.c.gone.Load() {
		return h.c
	}
	if m := b.circuits.Load(); m != nil {
		c := (*m)[k]
		if c != nil && c.hit.k == k {
			b.last.Store(&c.hit)
		}
		return c
	}
	return nil
}

// circuit returns the circuit of k, named k.name() when it is made, or nil when
// MaxTargets circuits exist already (the call goes unbroken). Keys with the same
// name share a circuit.
func (b *Breaker) circuit(k key) *circuit {
	if c := b.lookup(k); c != nil {
		return c
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var old map[key]*circuit
	if p := b.circuits.Load(); p != nil {
		if c, ok := (*p)[k]; ok {
			return c
		}
		old = *p
	}
	nm := k.name()
	c, ok := b.byName[nm]
	if len(old) >= maxKeys || !ok && len(b.byName) >= MaxTargets {
		old = b.evictIdle(old) // c among them, maybe
		if c, ok = b.byName[nm]; len(old) >= maxKeys || !ok && len(b.byName) >= MaxTargets {
			b.untracked.Add(1)
			return nil
		}
	}
	n := len(old)
	if !ok {
		c = b.newCircuit(nm)
		c.hit = hit{k: k, c: c}
		b.byName[nm] = c
	}
	m := make(map[key]*circuit, n+1)
	for k, v := range old {
		m[k] = v
	}
	m[k] = c
	b.circuits.Store(&m)
	return c
}

// usedGrain is the precision of circuit.used: it moves on at most once a second,
// so that the calls of many goroutines seldom write it.
const usedGrain = int64(time.Second)

// idleFor is how long a closed circuit must have admitted no call to be dropped to
// make room for a new target: twice its windows' length (the breaker's, the
// throttle's), by which time nothing is left in them, and it is as a new one.
func (b *Breaker) idleFor() int64 {
	d := b.cfg.window
	if t := b.cfg.throttle; t != nil {
		d = max(d, t.Window)
	}
	return 2 * int64(d)
}

// evictIdle drops from b the circuits that are closed and idle (idleFor), at most
// once a second, and returns old, the lookup map, without their keys (old itself
// when none is), stored. A call to their target later makes a new circuit. b.mu is
// held.
func (b *Breaker) evictIdle(old map[key]*circuit) map[key]*circuit {
	if !b.swept.IsZero() && int64(time.Since(b.swept)) < usedGrain {
		return old // looked less than a second ago: a call beyond a full table stays cheap
	}
	b.swept = time.Now()
	idle, dropped := b.idleFor(), 0
	for nm, c := range b.byName {
		if stateOf(c.sg.Load()) == Closed && int64(time.Since(c.epoch))-c.used.Load() >= idle {
			c.gone.Store(true)
			delete(b.byName, nm)
			dropped++
		}
	}
	if dropped == 0 {
		return old
	}
	m := make(map[key]*circuit, len(old))
	for k, c := range old {
		if !c.gone.Load() {
			m[k] = c
		}
	}
	b.circuits.Store(&m)
	return m
}

// ticket carries one call from admit to done. It lives on the adapter's stack.
type ticket struct {
	c     *circuit
	sg    uint64 // state and generation the call was admitted in
	start int64  // when it was admitted: ns since the circuit's epoch
	probe bool
	// stream: a gRPC stream, whose lifetime is neither slow nor a latency.
	stream bool
	// unthrottled: the adaptive throttle does not decide (the endpoints' do).
	unthrottled bool
	// counted: the adaptive throttle let the call through, and counts its answer
	// (at the level of the context the answer comes with, the call's).
	counted bool
}

// streamTicket carries a stream from its admission to its verdict, given once. A
// stream admitted as a half-open probe is judged at its first answer (a message, or
// its header): the target answered, which is all a probe asks, and a healthy stream
// (a watch) may then run for hours, holding the circuit half-open if its verdict
// waited for its end; that end is then not counted. Any other stream is counted when
// it ends; one that answered, then ended by its caller's cancellation or deadline,
// is a success.
type streamTicket struct {
	t             ticket
	method        string
	serverStreams bool // Result.ServerStreams
	answered      atomic.Bool
	reported      atomic.Bool
}

// streamAnswered takes the stream's first answer (later ones cost a load).
func (b *Breaker) streamAnswered(ctx context.Context, s *streamTicket) {
	if s.answered.Load() || s.answered.Swap(true) {
		return
	}
	if s.t.probe && s.reported.CompareAndSwap(false, true) {
		b.done(ctx, &s.t, &Result{Method: s.method, GRPC: true, ServerStreams: s.serverStreams})
	}
}

// streamEnded takes the stream's end, with its final error and trailer, unless its
// verdict was given.
func (b *Breaker) streamEnded(ctx context.Context, s *streamTicket, err error, trailer metadata.MD) {
	if !s.reported.CompareAndSwap(false, true) {
		return
	}
	if err != nil && s.answered.Load() && ctx.Err() != nil {
		err = nil // it answered, then its caller ended it
	}
	b.done(ctx, &s.t, &Result{Method: s.method, GRPC: true, Err: err, Trailer: trailer, ServerStreams: s.serverStreams})
}

// admit decides whether the call may be sent through c, filling t; it returns the
// refusal, an *OpenError, when it may not. The closed path reads the monotonic clock
// once (time.Since, not time.Now: half the price) and takes no lock.
func (b *Breaker) admit(ctx context.Context, c *circuit, t *ticket) error {
	t.c = c
	sg := c.sg.Load()
	t.start = int64(time.Since(c.epoch))
	if t.start-c.used.Load() >= usedGrain {
		c.used.Store(t.start)
	}
	if stateOf(sg) == Closed {
		t.sg = sg
		return b.throttled(ctx, c, t)
	}
	return b.admitSlow(ctx, c, t, sg)
}

func (b *Breaker) admitSlow(ctx context.Context, c *circuit, t *ticket, sg uint64) error {
	ns := t.start
	if stateOf(sg) == Open {
		if wait := c.until.Load() - ns; wait > 0 {
			return b.refuse(ctx, c, Open, wait)
		}
	}
	c.mu.Lock()
	sg = c.sg.Load()
	var moved bool
	switch stateOf(sg) {
	case Closed:
		c.mu.Unlock()
		t.sg = sg
		return b.throttled(ctx, c, t)
	case Open:
		if wait := c.until.Load() - ns; wait > 0 {
			c.mu.Unlock()
			return b.refuse(ctx, c, Open, wait)
		}
		sg = next(sg, HalfOpen)
		c.sg.Store(sg)
		c.inflight, c.passed, c.lost = 0, 0, 0
		moved = true
	case HalfOpen:
		if c.inflight > 0 && ns >= c.lease {
			// The probes in flight have been out for a whole sleep: they are given
			// up on as lost (their outcomes will not count), and new ones may go,
			// unless too many were lost.
			c.lost += c.inflight
			if c.lost >= MaxLostProbes {
				b.rest(c, sg, ns)
				wait := c.until.Load() - ns
				c.mu.Unlock()
				b.transition(ctx, c, HalfOpen, Open)
				return b.refuse(ctx, c, Open, wait)
			}
			sg = next(sg, HalfOpen)
			c.sg.Store(sg)
			c.inflight, c.passed = 0, 0
		}
	}
	if c.inflight+c.passed >= b.cfg.probes {
		wait := c.lease - ns
		c.mu.Unlock()
		return b.refuse(ctx, c, HalfOpen, max(wait, 0))
	}
	c.inflight++
	c.lease = ns + c.sleep
	c.mu.Unlock()
	t.sg, t.probe = sg, true
	b.probes.Add(1)
	if moved {
		b.transition(ctx, c, Open, HalfOpen)
	}
	c.tel.RecordProbe(ctx)
	return nil
}

func (b *Breaker) refuse(ctx context.Context, c *circuit, s State, wait int64) error {
	b.refused.Add(1)
	c.tel.RecordRefused(ctx, s.otel(), time.Duration(wait))
	e := &OpenError{Target: c.name, State: s, RetryAfter: time.Duration(wait)}
	if s == Open {
		e.taken = !b.promise(ctx, c, wait)
	}
	return e
}

// promise reports whether a call refused while c is open, its next probe wait
// away, is told to come back for the probe. A call whose deadline leaves no time
// for the probe's answer (the target's typical latency, once known) is told the
// time, and takes no promise. Of the others, as many per opening as the circuit
// has probes are: the rest are told that the probes are taken (no retry), for,
// come back together at the probe, all but the probes would find them in flight
// and be refused again, their budget spent waiting.
func (b *Breaker) promise(ctx context.Context, c *circuit, wait int64) bool {
	if dl, ok := ctx.Deadline(); ok {
		need := time.Duration(wait)
		if typical, n := c.lat.TrackedAt(int64(time.Since(c.epoch))); n >= typicalMinSamples {
			need += typical
		}
		if time.Until(dl) <= need {
			return true
		}
	}
	until := c.until.Load()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.promisedFor != until {
		c.promisedFor, c.promised = until, 0
	}
	if c.promised >= b.cfg.probes {
		return false
	}
	c.promised++
	return true
}

func (b *Breaker) transition(ctx context.Context, c *circuit, from, to State) {
	if to == Open {
		b.opens.Add(1)
	}
	c.tel.RecordTransition(ctx, from.otel(), to.otel())
	for _, f := range b.cfg.observers {
		f(ctx, Event{Target: c.name, From: from, To: to})
	}
}

// done classifies the outcome of a call admitted by t and counts it. r holds what
// the adapter knows of the call; done fills in the rest.
func (b *Breaker) done(ctx context.Context, t *ticket, r *Result) {
	c := t.c
	ns := int64(time.Since(c.epoch))
	li := levelIndex(criticality.From(ctx))
	samples := describe(ctx, t, r, ns, li)
	o := b.cfg.classify(*r)
	k := refusalOf(r) // of a success without an error status, a test or two
	switch {
	case k == tooMany || o == Neutral && k.up() && !(k == cannotFinish && starved(r)):
		noteAt(&c.shed, ns)
	case o == Success:
		noteAt(&c.served[li], ns)
	}
	if t.counted {
		c.thr.count(ns, li, verdict(o, r, k))
	}
	slow := b.cfg.slow > 0 && o != Neutral && !t.stream && r.Took > b.cfg.slow
	b.count(ctx, c, o, slow)
	lost := t.probe && o == Failure && !slow && lostAnswer(r)
	if o == Success && !t.stream {
		if s := c.seen.Add(1); s%sampleEvery == 0 || samples < denseSamples {
			c.lat.AddAt(ns, r.Took)
		}
	}
	if o == Neutral && !t.probe {
		return
	}
	if o == Success && !slow && stateOf(t.sg) == Closed {
		// The closed path's common case takes no lock: a success cannot trip.
		if c.sg.Load() == t.sg {
			c.win.addSuccess(ns)
			if c.consec.Load() != 0 {
				c.consec.Store(0)
			}
		}
		return
	}
	b.settle(ctx, t, o, slow, lost, ns)
}

// describe fills in what the circuit knows of the call that t admitted and that
// ended at ns: its target, its time, its budget, the target's typical latency and
// whether it was seen shedding (the call's level has index li). It returns the
// number of latencies the typical one was read from.
func describe(ctx context.Context, t *ticket, r *Result, ns int64, li int) int {
	c := t.c
	r.Target = c.name
	r.Took = time.Duration(ns - t.start)
	if d, ok := ctx.Deadline(); ok {
		r.Budget, r.HasBudget = d.Sub(c.epoch.Add(time.Duration(t.start))), true
	}
	typical, samples := c.lat.TrackedAt(ns)
	if samples >= typicalMinSamples {
		r.Typical, r.HasTypical = typical, true
	}
	r.CallerErr = ctx.Err()
	r.SheddingSince = c.sheddingSince(li, t.start)
	return samples
}

// sheddingSince reports whether, after start, the target refused a call through c
// for load or served one of a higher level than index li: it was up and shedding
// while a call of that level waited.
func (c *circuit) sheddingSince(li int, start int64) bool {
	if c.shed.Load() > start {
		return true
	}
	for l := li + 1; l < levels; l++ {
		if c.served[l].Load() > start {
			return true
		}
	}
	return false
}

// okGrain is the precision of circuit.shed and served: each moves on at most once
// per grain, so that answers on many goroutines seldom write the same word.
const okGrain = int64(time.Millisecond)

// noteAt notes in at an answer that came at ns. A concurrent call may store an
// older time over a newer one: at is then early, which makes a timeout a failure,
// as it was before the answer.
func noteAt(at *atomic.Int64, ns int64) {
	if ns-at.Load() >= okGrain {
		at.Store(ns)
	}
}

// settle moves t's circuit on outcome o under its lock: counted in the window when
// closed (and tripping it), or deciding a probe when half-open (lost: its answer
// never came, see MaxLostProbes). An outcome of a generation that has ended is stale
// and dropped.
func (b *Breaker) settle(ctx context.Context, t *ticket, o Outcome, slow, lost bool, ns int64) {
	c := t.c
	c.mu.Lock()
	sg := c.sg.Load()
	if sg != t.sg {
		c.mu.Unlock()
		return
	}
	from := stateOf(sg)
	to := from
	switch {
	case from == Closed:
		to = b.countClosed(c, sg, o, slow, ns)
	case o == Neutral:
		c.inflight--
	case lost:
		c.inflight--
		if c.lost++; c.lost >= MaxLostProbes {
			to = b.rest(c, sg, ns)
		}
	case o == Failure || slow:
		to = b.open(c, sg, ns)
	default:
		c.inflight--
		c.passed++
		if c.passed >= b.cfg.probes {
			c.sg.Store(next(sg, Closed))
			c.win.reset()
			c.consec.Store(0)
			c.opened = 0
			to = Closed
		}
	}
	c.mu.Unlock()
	if to != from {
		b.transition(ctx, c, from, to)
	}
}

// countClosed counts outcome o of a closed circuit and opens it when a trip is due,
// returning the state it leaves c in. c.mu is held.
func (b *Breaker) countClosed(c *circuit, sg uint64, o Outcome, slow bool, ns int64) State {
	run := int32(0)
	if o == Failure {
		run = c.consec.Add(1)
	} else {
		c.consec.Store(0)
	}
	c.win.add(ns, o == Failure, slow)
	if b.cfg.consecutive > 0 && run >= int32(b.cfg.consecutive) ||
		trips(c.win.totals(ns), b.cfg.minCalls, b.cfg.failureRatio, b.cfg.slow > 0, b.cfg.slowRatio) {
		c.opened = 0
		return b.open(c, sg, ns)
	}
	return Closed
}

// open moves c, in state and generation sg, to open at time ns, for the next sleep.
// c.mu is held.
func (b *Breaker) open(c *circuit, sg uint64, ns int64) State {
	c.opened++
	return b.rest(c, sg, ns)
}

// rest moves c, in state and generation sg, to open at time ns for the sleep of its
// current opening: open's, or, after lost probes, the same again. c.mu is held.
func (b *Breaker) rest(c *circuit, sg uint64, ns int64) State {
	c.sleep = int64(b.cfg.sleep.Delay(c.opened, b.cfg.random()))
	c.until.Store(ns + c.sleep)
	c.win.reset()
	c.consec.Store(0)
	c.sg.Store(next(sg, Open))
	return Open
}

// count adds the outcome to the statistics and the outcomes metric.
func (b *Breaker) count(ctx context.Context, c *circuit, o Outcome, slow bool) {
	switch o {
	case Success:
		b.successes.Add(1)
		c.tel.RecordOutcome(ctx, record.BreakerSuccess, slow)
	case Failure:
		b.failures.Add(1)
		c.tel.RecordOutcome(ctx, record.BreakerFailure, slow)
	default:
		b.neutral.Add(1)
		c.tel.RecordOutcome(ctx, record.BreakerNeutral, false)
	}
	if slow {
		b.slow.Add(1)
	}
}

// Stats is a snapshot of a [Breaker]'s counters, each counted since it was made.
type Stats struct {
	// Successes, Failures and Neutral count the outcomes of the calls sent
	// ([Classify]); Slow counts those of them (successes or failures) slower than
	// the slow-call threshold.
	Successes, Failures, Neutral, Slow uint64
	// Refused is the number of calls refused before sending ([ErrOpen]).
	Refused uint64
	// Throttled is the number of calls the adaptive throttle (on by default,
	// [WithAdaptiveThrottling]) refused before sending ([ErrThrottled]).
	Throttled uint64
	// Probes is the number of calls let through in half-open.
	Probes uint64
	// Opens is the number of times a circuit opened (from closed or half-open).
	Opens uint64
	// Untracked is the number of calls sent unbroken because [MaxTargets] circuits
	// in use existed already.
	Untracked uint64
	// Targets is the number of circuits.
	Targets int
}

// Stats returns the current counters. Fields are read one by one.
func (b *Breaker) Stats() Stats {
	b.mu.Lock()
	n := len(b.byName)
	b.mu.Unlock()
	return Stats{
		Successes: b.successes.Load(),
		Failures:  b.failures.Load(),
		Neutral:   b.neutral.Load(),
		Slow:      b.slow.Load(),
		Refused:   b.refused.Load(),
		Throttled: b.throttledN.Load(),
		Probes:    b.probes.Load(),
		Opens:     b.opens.Load(),
		Untracked: b.untracked.Load(),
		Targets:   n,
	}
}

// Circuit is a snapshot of one target's circuit.
type Circuit struct {
	Target string
	// State is the state as the next call would find it: an open circuit whose sleep
	// is over reads half-open.
	State State
	// Calls, Failures and Slow are the window's counts (closed state only).
	Calls, Failures, Slow int
	// RetryAfter is, while open, the time until the next probe.
	RetryAfter time.Duration
	// Throttle is the adaptive throttle's state for each level ([WithAdaptiveThrottling]),
	// the lowest first; nil with [WithoutAdaptiveThrottling].
	Throttle []ThrottleLevel
}

// State returns the state of target's circuit (a name as [Result.Target] gives it:
// "https://example.com:443", a gRPC target), Closed when it has none.
func (b *Breaker) State(target string) State {
	c, _ := b.Circuit(target)
	return c.State
}

// Circuit returns a snapshot of target's circuit, and false when it has none.
func (b *Breaker) Circuit(target string) (Circuit, bool) {
	b.mu.Lock()
	c := b.byName[target]
	b.mu.Unlock()
	if c == nil {
		return Circuit{Target: target}, false
	}
	return b.snapshot(c, time.Now()), true
}

// Circuits returns a snapshot of every circuit.
func (b *Breaker) Circuits() []Circuit {
	b.mu.Lock()
	cs := make([]*circuit, 0, len(b.byName))
	for _, c := range b.byName {
		cs = append(cs, c)
	}
	b.mu.Unlock()
	now := time.Now()
	out := make([]Circuit, len(cs))
	for i, c := range cs {
		out[i] = b.snapshot(c, now)
	}
	return out
}

func (b *Breaker) snapshot(c *circuit, now time.Time) Circuit {
	ns := int64(now.Sub(c.epoch))
	var thr []ThrottleLevel
	if c.thr != nil {
		thr = c.thr.snapshot(b.cfg.throttle, ns)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Circuit{Target: c.name, State: stateOf(c.sg.Load()), Throttle: thr}
	switch s.State {
	case Closed:
		t := c.win.totals(ns)
		s.Calls, s.Failures, s.Slow = int(t.calls), int(t.failures), int(t.slow)
	case Open:
		if wait := c.until.Load() - ns; wait > 0 {
			s.RetryAfter = time.Duration(wait)
		} else {
			s.State = HalfOpen
		}
	}
	return s
}
