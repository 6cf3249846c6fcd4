package shortcircuit

// The adaptive concurrency limit ([AdaptiveLimit]): the rule that moves the limit a
// limiter applies, from what the handler's durations say about its knee, the
// concurrency beyond which more handlers at once buy no throughput.
//
// What it measures. The rule runs the limit in rounds of three windows: an upper
// window at the limit, a lower window below it (a step: an eighth of the limit, at
// least one, unless said otherwise below), and an upper window again. A window's
// measure begins when the handlers in flight reach its limit (at the latest one mean
// handler duration after the limit took force), and it counts only the requests
// admitted under its limit (since it took force; rising, since the handlers reached
// it): one admitted earlier waited behind the handlers the previous limit let in,
// and measures that limit. Each window records the time-averaged handlers in
// flight, n, and the mean duration of its requests, s. At the end of the round the
// lower window is compared with the mean of the two upper ones around it, so a
// handler that turns slower or faster steadily across the round cancels out. The
// elasticity
//
//	e = ln(s_upper / s_lower) / ln(n_upper / n_lower)
//
// is near 0 when the extra handlers ran as fast as the others (throughput n/s grew
// with n: the lower window was below the knee) and near 1 when every request took
// longer in proportion (throughput stayed: the upper windows were above the knee,
// and the extra requests only queued inside the handler). The knee the round places
// is where the throughput it measured stops growing: n_lower × (n_upper/n_lower)^(1-e).
//
// What it decides (decide). A round teaches nothing, and the limit stays, when the
// load and not the limit set the concurrency (n under 2% higher in the upper windows,
// or the lower window under 90% of its limit) or the handler changed speed across
// the round (the upper windows' durations differ by more than 25%). Otherwise the
// first of these that applies is the round's verdict:
//
//  1. a recheck (see holding, below) is decided by the knee it places;
//  2. the last move was a grow and e reached Tolerance: the grow bought nothing, so
//     the limit before it was the knee; the limit settles a headroom above it (a
//     step, or Headroom's share of the knee) and holds (grewForNothing); if the
//     grow was made on weak evidence (e at half Tolerance or more), the limit goes
//     back to before it instead, and searches on;
//  3. holding, e reached half of Tolerance: a round of the hold (countDownHold);
//  4. e reached Tolerance, or half of it with a lower window more than a step
//     below: fall to the knee the round placed, at least a step and never past the
//     lower window (fallToKnee);
//  5. the upper windows' durations differ by more than 10%: a trend the round
//     cancels only roughly; keep;
//  6. an upper window held a request back (the limit, not the load, capped the
//     concurrency): grow by a step; from the third grow in a row by twice the last,
//     at most half the limit (grow);
//  7. keep.
//
// Its states. Searching (hold.on false), the limit moves by the verdicts above. After
// a fall all the way to its lower window (or within a quarter of the way), the knee
// is likely lower still, and the next lower window goes wide: twice as far below as
// the fall (at least a quarter, at most half the limit); so does the first one, half
// below Initial, a guess. A wide lower window goes further down when Little's law
// places the knee lower: to the first upper window's throughput times the handler's
// unloaded duration (base, or while it is not known the fastest duration seen), at
// least an eighth of the limit (probe). Below the knee or at it, the window places
// the knee where it is in one round (the knee a round places is the upper windows'
// throughput times the lower window's duration); a handler that turned slower for
// every request only costs a lower window below the knee. A wide lower window at most
// half the limit that kept the first upper window's throughput (e against it alone
// reaching Tolerance) decides the round without the second upper window (keptAll):
// over a limit five times the knee, a window lasts as long as the wait inside the
// handler that limit causes (half a second over 4 slots of 100 ms at 20), and the
// second one would keep the handlers queueing that long again. Holding (hold.on, from
// verdict 2 or a settle), the limit sits a headroom above the knee: each round that
// finds the extra concurrency bought little counts the hold down, and a clear gain (e
// under half of Tolerance, verdict 6) ends it with a grow: the knee rose. When the
// hold is up, or the handler turns 20% slower while holding, a recheck is due
// (hold.recheck): the next round's lower window goes a step below the knee (two steps
// below the limit), and the knee it places decides (a round with a trend leaves the
// recheck due): a clear gain still grows; where it was, the hold starts again twice
// as long (up to holdMax rounds); lower, the limit falls to it. With Headroom, a knee
// placed a step or more higher moves the headroom above it at once. While it holds a
// step of headroom (no Headroom), its upper windows keep that step for the highest
// level the limiter has seen lately (reserved): a request let in above the knee waits
// inside the handler in the handler's order, and one of a lower level there would take
// the next slot to free before a higher one that came later. A round that learned
// nothing while the step was reserved and held requests back (the highest level too
// rare to fill it: the concurrency stayed at the knee in every window) opens it to
// every level for the next round (hold.open), which measures the limit as without
// levels: a knee that rose is found.
//
// Two memories shorten the search. base is the handler's unloaded mean duration: that
// of the lower window of a round that bought throughput (it ran below the knee). A
// later lower window within a tenth of it was not above the knee either: a fall, or a
// recheck that finds the knee lower, then settles at once a headroom above the knee
// Little's law places there (throughput × base), without a wide window below it, and
// a hold that is up starts again twice as long instead of rechecking. Until base is
// known, a lower window within a tenth of the fastest duration seen counts as at it,
// and its duration becomes base (a handler with fast answers among slow ones, a cache
// or quick errors, has its fastest far below its mean: no window matches it, and a
// wide lower window goes to an eighth of the limit). calm counts the rounds in a row
// that kept the limit on evidence: their upper windows last 2^min(calm, calmMax)
// times as long. An upper window that runs more than 20% slower or faster than the
// last one at a kept limit (ref) ends the calm; faster, it also forgets base.
//
// Window lengths. An upper window lasts Samples/2 completions and four mean
// durations (times the calm's factor at a kept limit; after a fall, and at the
// start, Samples/4 and one duration); the lower one Samples/4 and two durations (one
// when wide). The first window begins when the limit first holds a request back.
// At a limit of 1 there is nothing below to compare with: the first upper window
// repeats, and one that held requests back grows the limit.

import (
	"math"
	"time"
)

// adaptive is the adaptive limit's rule (see the comment above). Its owner
// serialises calls (limiter.mu), reports every change of the handlers in flight
// (inFlight) and every request the limit held back (held), and passes each handler's
// duration to update, which returns the limit to apply.
type adaptive struct {
	cfg   AdaptiveLimit
	limit int         // the operating limit: the upper windows'
	phase windowPhase // the window running
	lo    int         // the lower window's limit, set when it begins

	win     window           // the window running
	windows [3]windowFigures // the round's windows so far, by phase

	// The last move.
	run    int  // its size, signed: > 0 a grow, < 0 a fall, 0 the limit kept
	streak int  // grows in a row
	wide   bool // it fell (nearly) all the way to its lower window: the next one goes wide
	// The last grow: made from a hold (it probed the headroom), and the
	// elasticity it was made on.
	grewFromHold bool
	grewOn       float64

	hold hold

	// What the rule remembers of the handler.
	base    float64 // its unloaded mean duration (zero: not known)
	fastest float64 // the shortest duration seen (zero: none yet)
	ref     float64 // the mean duration of the last upper window at a kept limit
	calm    int     // rounds in a row that kept the limit
}

// windowPhase is which window of the round runs.
type windowPhase uint8

const (
	phaseUpper1 windowPhase = iota // the first upper window, at the limit
	phaseLower                     // the lower window, below it
	phaseUpper2                    // the second upper window
)

// hold is the steady state: the limit settled a headroom above the knee.
type hold struct {
	on bool // the limit is head above the knee, until a move
	// recheck: the next round rechecks the knee. Set when the hold is up
	// (countDownHold) or the handler turned slower while holding
	// (noticeSpeedChange); cleared by a recheck, a settle, or a round of the
	// hold with rounds left. A grow out of the hold leaves it set, so that a
	// hold found again by a grow that buys nothing starts with a recheck.
	recheck bool
	head    int // the limit's distance above the knee
	// open: the reserved slots (reserved) are open to every level for a
	// round: the last one, with them reserved, measured nothing.
	open   bool
	at     int // the limit the hold last began at
	left   int // rounds left before a recheck
	rounds int // the length of the last hold
}

// The steady state: after calm rounds in a row that kept the limit, the upper
// windows last 2^min(calm, calmMax) times as long; a hold lasts at most holdMax
// rounds before a recheck.
const (
	calmMax = 3
	holdMax = 8
)

func newAdaptive(a AdaptiveLimit) *adaptive {
	// Initial is a guess: the first lower window goes wide, half below it, as
	// after a fall, so that a limit far above the knee comes down in fewer
	// rounds.
	return &adaptive{cfg: a, limit: a.Initial, run: -max(a.Initial/4, 1), wide: true}
}

// step is the rule's unit of change at a limit (or knee) n: an eighth, at least one.
func step(n int) int { return max(n/8, 1) }

// inForce is the limit the limiter applies now: the lower window's while it runs.
func (g *adaptive) inForce() int {
	if g.phase == phaseLower {
		return g.lo
	}
	return g.limit
}

// reserved is how many slots at the top of the limit in force only the highest
// level seen may take: the step of headroom above the knee while the limit holds
// it (in its upper windows), none otherwise. A request let in above the knee waits
// inside the handler for a slot, in the handler's order, not by level: one of a
// lower level there would hold back a higher one that came later. A grow and a
// search let every level in (they must fill the limit to measure it), and so does
// a Headroom asked for, whose requests are there to keep a backend working.
func (g *adaptive) reserved() int {
	if g.hold.on && !g.hold.open && g.cfg.Headroom == 0 && g.phase != phaseLower {
		return min(g.hold.head, g.limit-1)
	}
	return 0
}

// inFlight records that n handlers run from now on.
func (g *adaptive) inFlight(now time.Time, n int) { g.win.inFlight(now, n, g.inForce()) }

// held records a request that found the limit taken: it queued or was refused.
func (g *adaptive) held() { g.win.demand = true }

// update takes one handler's duration, admitted at began (zero: not known) and
// ending at now, and the handler's mean duration svc; it returns the limit in
// force.
func (g *adaptive) update(now, began time.Time, took, svc time.Duration) int {
	if d := float64(took); d > 0 && (g.fastest == 0 || d < g.fastest) {
		g.fastest = d
	}
	switch {
	case !g.win.begun():
		// The first window begins when the limit first holds a request back:
		// before, the load set the concurrency (and, rising, the durations).
		if g.win.demand {
			g.win.begin(now, svc, g.inForce())
		}
	case g.win.counts(now, began):
		g.win.add(took)
		if g.windowDone(now, svc) {
			g.closeWindow(now)
			g.win.begin(now, svc, g.inForce())
		}
	}
	return g.inForce()
}

// windowDone says whether the window running has measured enough at now.
func (g *adaptive) windowDone(now time.Time, svc time.Duration) bool {
	var samples, spans int
	if g.phase == phaseLower {
		samples, spans = g.lowerNeeds()
	} else {
		g.noticeSpeedChange()
		samples, spans = g.upperNeeds()
	}
	return g.win.n >= samples && now.Sub(g.win.from) >= time.Duration(spans)*max(svc, time.Millisecond)
}

// lowerNeeds is how many completions, and mean durations, the lower window lasts:
// a quarter of Samples and two; one duration when wide.
func (g *adaptive) lowerNeeds() (samples, spans int) {
	if g.wide {
		return max(g.cfg.Samples/4, 1), 1
	}
	return max(g.cfg.Samples/4, 1), 2
}

// upperNeeds is how many completions, and mean durations, an upper window lasts:
// half of Samples and four, scaled by the calm, or only a quarter of Samples and
// one while the limit falls or starts; a limit that grew is judged unscaled.
func (g *adaptive) upperNeeds() (samples, spans int) {
	samples, spans = max(g.cfg.Samples/2, 1), 4
	switch {
	case g.run > 0:
		return samples, spans
	case g.wide || g.run < 0:
		// A limit above the knee inflates the mean duration the windows are
		// measured in (20 handlers behind 4 slots take 5 times the work); one
		// of them, and as many completions as a lower window's, is enough to
		// see the throughput stay.
		return max(g.cfg.Samples/4, 1), 1
	}
	scale := 1 << min(g.calm, calmMax)
	return samples * scale, spans * scale
}

// noticeSpeedChange ends the calm when an upper window, at a kept limit, runs more
// than 20% slower or faster than the last one: the long windows of the steady state
// would learn late. Slower while holding, the knee may have fallen: recheck it.
// Faster, the unloaded duration is not known any more. (A knee that rose shows in
// the next round as a gain.)
func (g *adaptive) noticeSpeedChange() {
	m := g.win.mean()
	changed := m > 1.2*g.ref || 1.2*m < g.ref
	if (g.calm > 0 || g.hold.on) && g.run <= 0 && g.ref > 0 && g.win.n >= max(g.cfg.Samples/2, 1) && changed {
		g.calm = 0
		g.hold.recheck = g.hold.recheck || (g.hold.on && m > g.ref)
		if m < g.ref {
			g.base = 0
		}
	}
}

// closeWindow records the window that ends at now and moves to the next one: at
// the end of the round, the limit moves by what its windows measured.
func (g *adaptive) closeWindow(now time.Time) {
	w := g.win.close(now, g.inForce())
	g.windows[g.phase] = w
	if g.phase != phaseLower && g.run <= 0 {
		g.ref = w.s // a window at a limit kept (a grow's is not)
	}
	switch {
	case g.phase == phaseUpper1 && g.below() == g.limit:
		// At 1: nothing below to compare with; grow if the limit held requests back.
		if w.demand {
			g.raise()
		}
	case g.phase == phaseUpper1:
		g.phase, g.lo = phaseLower, g.below()
	case g.phase == phaseLower && g.keptAll():
		// The round is decided without its second upper window.
		g.windows[phaseUpper2] = g.windows[phaseUpper1]
		g.phase = phaseUpper1
		g.decide()
	case g.phase == phaseLower:
		g.phase = phaseUpper2
	default:
		g.phase = phaseUpper1
		g.decide()
	}
}

// below is the lower window's limit: a step below the limit; wide, twice the last
// fall below it (at least a quarter, at most half the limit), so that the next fall
// goes to a limit measured to keep the throughput; rechecking, a step below the
// knee.
func (g *adaptive) below() int {
	gap := step(g.limit)
	switch {
	case g.wide:
		gap = max(gap, g.limit/4, min(-2*g.run, max(g.limit/2, 1)), g.limit-g.probe())
	case g.hold.on && g.hold.recheck && g.cfg.Headroom > 0:
		gap = min(g.hold.head+step(g.limit-g.hold.head), g.limit-1)
	case g.hold.on && g.hold.recheck:
		gap = min(2*gap, g.limit-1)
	}
	return max(g.limit-gap, 1)
}

// probe is how far down a wide lower window may go: to where Little's law places
// the knee, the first upper window's throughput times the handler's unloaded
// duration (base, or the fastest seen while it is not known), at least an eighth of
// the limit; the limit when nothing is known.
func (g *adaptive) probe() int {
	d, up := g.unloaded(), g.windows[phaseUpper1]
	if d == 0 || !(up.s > 0) {
		return g.limit
	}
	return max(int(math.Round(up.n/up.s*d)), g.limit/8, 1)
}

// unloaded is the handler's unloaded duration as far as the rule knows it: base,
// or the fastest duration seen while base is not known (zero: neither).
func (g *adaptive) unloaded() float64 {
	if g.base > 0 {
		return g.base
	}
	return g.fastest
}

// keptAll says, at the end of a lower window, whether the round may be decided
// without its second upper window: the lower window went wide, to at most half
// the limit, and kept the first upper window's throughput (the elasticity against
// it reached Tolerance). A change of the handler's speed, which the second window
// would cancel, moves the elasticity of so wide a round by little (a quarter
// slower across it, by under a third), and a slower lower window only places the
// knee higher.
func (g *adaptive) keptAll() bool {
	a, lo := g.windows[phaseUpper1], g.windows[phaseLower]
	if !g.wide || 2*g.lo > g.limit || !(lo.n >= 0.9*float64(g.lo) && lo.s > 0 && a.s > 0) {
		return false
	}
	r := a.n / lo.n
	return r >= 2 && math.Log(a.s/lo.s)/math.Log(r) >= g.cfg.Tolerance
}

// roundFigures is what a round's windows measured.
type roundFigures struct {
	e      float64 // the elasticity
	r      float64 // the upper windows' handlers in flight over the lower window's
	lowN   float64 // the lower window's handlers in flight
	lowS   float64 // and mean duration
	lower  int     // the lower window's limit
	demand bool    // an upper window held a request back
	trend  bool    // the upper windows' mean durations differ by more than 10%
	// atBase: the lower window ran at the unloaded speed (within a tenth of
	// base), so it was not above the knee; fast: and the upper windows agree,
	// so the knee is where Little's law places their throughput at that speed:
	// little.
	atBase, fast bool
	little       float64
}

// knee is the concurrency at which the round places the knee: where the throughput
// the two windows measured stops growing (n^(1-e) grows as the throughput does;
// below the knee it grows as n).
func (f roundFigures) knee() float64 { return f.lowN * math.Pow(f.r, 1-f.e) }

// read returns the round's figures, or false when the round teaches nothing: the
// load, not the limit, set the concurrency (in the lower window too: a lull in the
// arrivals is no measure of the limit), or the handler changed speed across it.
func (g *adaptive) read() (roundFigures, bool) {
	a, lo, b := g.windows[phaseUpper1], g.windows[phaseLower], g.windows[phaseUpper2]
	upN, upS := (a.n+b.n)/2, (a.s+b.s)/2
	r := upN / lo.n
	if !(lo.n > 0 && lo.s > 0 && a.s > 0 && b.s > 0) || r < 1.02 || lo.n < 0.9*float64(g.lo) || max(a.s, b.s) > 1.25*min(a.s, b.s) {
		return roundFigures{}, false
	}
	u := g.unloaded()
	f := roundFigures{
		e: math.Log(upS/lo.s) / math.Log(r), r: r, lowN: lo.n, lowS: lo.s, lower: g.lo,
		demand: a.demand || b.demand,
		trend:  max(a.s, b.s) > 1.1*min(a.s, b.s),
		atBase: u > 0 && lo.s <= 1.1*u,
		little: upN / upS * u,
	}
	f.fast = f.atBase && !f.trend
	return f, true
}

// decide moves the limit by what the round measured.
func (g *adaptive) decide() {
	f, ok := g.read()
	open := g.hold.open
	g.hold.open = false
	if !ok {
		g.keep(g.wide) // a wide lower window has measured nothing yet: it stays wide
		g.calm = 0
		// The reserved slots, not the load, may have kept the concurrency
		// from the limit (the highest level rare): the next round opens them
		// to every level, to measure the limit.
		g.hold.open = !open && g.reserved() > 0 && (g.windows[phaseUpper1].demand || g.windows[phaseUpper2].demand)
		return
	}
	wide := g.wide // a verdict that keeps the limit keeps the next lower window wide
	g.wide = false
	g.learnBase(f)
	tol := g.cfg.Tolerance
	deep := g.limit-f.lower > step(g.limit)  // the lower window ran more than a step below
	if g.hold.on && g.hold.recheck && deep { // the lower window was a recheck's
		if !f.trend { // else check again in the next round
			g.decideRecheck(f)
		}
		return
	}
	switch {
	case f.e >= tol && g.run > 0:
		g.grewForNothing(f)
	case f.e >= tol/2 && g.hold.on:
		// A headroom above the knee, as intended. (Only a clear gain, under
		// half the tolerance, says the knee rose: one noisy round does not end
		// the hold.)
		g.countDownHold(f)
	case f.e >= tol || (f.e >= tol/2 && deep):
		// The lower window kept the throughput, or (wider than a step) part of it.
		g.fallToKnee(f)
	case f.trend:
		// Below the tolerance, but the handler changed speed across the round
		// (by less than the 25% that voids it): a trend the mean of the upper
		// windows cancels only roughly, and a grow on it would be a guess.
		g.keep(wide)
		g.calm = 0
	case f.demand:
		g.grow(f.e)
	default:
		g.keep(wide)
		g.calm++
	}
}

// learnBase remembers the handler's unloaded duration: that of a lower window that
// bought throughput (it ran below the knee), or a faster one at it.
func (g *adaptive) learnBase(f roundFigures) {
	switch {
	case f.e < g.cfg.Tolerance && !f.trend:
		g.base = f.lowS
	case f.fast && g.base > 0:
		g.base = min(g.base, f.lowS)
	case f.fast:
		g.base = f.lowS // at the fastest speed seen
	}
}

// grewForNothing settles after a grow that bought nothing: the limit before it did
// (it grew because it did), so the knee is there, and a headroom above it keeps the
// handler full while a request is handed a freed slot. The limit stays a step
// above the last one that bought (back from a larger grow), or Headroom's share
// above the knee, and holds.
func (g *adaptive) grewForNothing(f roundFigures) {
	was := g.limit - g.run
	g.run, g.streak = 0, 0
	if g.grewOn >= g.cfg.Tolerance/2 {
		// The grow was on weak evidence: the limit before it may be at the
		// knee's step above already. Back to it, and ask again.
		g.limit = was
		return
	}
	if g.cfg.Headroom > 0 {
		// The knee is below was by the headroom if the grow probed a headroom,
		// and where Little's law puts it if the lower window ran at the
		// unloaded speed.
		k := was
		if g.grewFromHold {
			k = max(was-g.hold.head, 1)
		}
		if f.fast {
			k = min(k, max(int(math.Round(f.little)), 1))
		}
		g.limit = min(k+g.headroom(k), g.cfg.Max)
		g.hold.head = g.limit - k
	} else {
		g.limit = min(was+step(was), g.limit)
		g.hold.head = g.limit - was
	}
	if !g.hold.on && g.limit == g.hold.at {
		g.hold.longer() // found again where it was
		g.hold.on = true
	} else {
		g.hold.begin(g.limit)
	}
}

// countDownHold counts a round of the hold; when it is up, the next round
// rechecks the knee, unless the lower window, a step below the limit, ran at the
// unloaded speed: then the knee is no lower, and a recheck below it would cost a
// window of throughput to learn that; the hold starts again, twice as long.
func (g *adaptive) countDownHold(f roundFigures) {
	g.hold.left--
	g.hold.recheck = g.hold.left <= 0
	if g.hold.recheck && f.fast {
		g.hold.recheck = false
		g.hold.longer()
	}
	g.run, g.streak = 0, 0
	g.calm++
}

// fallToKnee falls to where the round placed the knee, at least a step and at most
// to the lower window; after a fall all the way, the next lower window goes wide.
// If the lower window ran at the unloaded speed it was at the knee, not above it:
// the limit settles a headroom above the knee without a wide window below it.
func (g *adaptive) fallToKnee(f roundFigures) {
	if f.fast {
		g.settle(f.little)
		return
	}
	knee := int(math.Round(f.knee()))
	g.fall(min(max(knee, f.lower), g.limit-step(g.limit)), f.lower)
	if f.atBase {
		// The upper windows changed speed, so Little's law cannot place the
		// knee, but the lower one ran at the unloaded speed: the knee is not
		// below it, and the next lower window goes no wider.
		g.wide = false
	}
}

// grow grows the limit after a round that found the extra concurrency bought
// throughput while the limit held requests back (e the round's elasticity). One up
// from the steady state is a probe, which stays calm until a second grow confirms it.
func (g *adaptive) grow(e float64) {
	probe := g.run <= 0 && g.calm > 0
	g.grewFromHold = g.hold.on
	g.raise()
	g.hold.on, g.grewOn = false, e
	if !probe {
		g.calm = 0
	}
}

// decideRecheck decides a round that rechecked the knee: its lower window ran a
// step below the knee, so the knee the round places is measured without leaving the
// headroom.
func (g *adaptive) decideRecheck(f roundFigures) {
	g.hold.recheck = false
	knee := int(math.Round(f.knee()))
	if g.cfg.Headroom > 0 && g.recheckHeadroom(knee) {
		return
	}
	switch {
	case f.e < g.cfg.Tolerance/2 && f.demand:
		// The knee rose above the limit: learn again from here.
		g.hold.on = false
		g.raise()
		g.grewFromHold, g.grewOn = true, f.e
		g.calm = 0
	case knee >= g.limit-step(g.limit):
		g.holdAgain()
	case f.fast:
		// The knee fell, and the lower window was not above it: settle a
		// headroom above it.
		g.settle(f.little)
	default:
		// The knee fell: fall to it; all the way down, the next lower window
		// goes wide.
		g.fall(max(knee, f.lower), f.lower)
	}
}

// recheckHeadroom decides a recheck of a Headroom by the knee it placed, against
// the knee the headroom sat on and a step either side of it: risen, the headroom
// goes above it at once (as far as the upper windows could show, up to the limit);
// where it was, the hold starts again. It returns false when the knee fell, for
// decideRecheck to decide as for a step of headroom.
func (g *adaptive) recheckHeadroom(knee int) bool {
	was := g.limit - g.hold.head
	switch {
	case knee >= was+step(was):
		k := min(knee, g.limit)
		g.limit = min(k+g.headroom(k), g.cfg.Max)
		g.hold.head = g.limit - k
		g.hold.begin(g.limit)
		g.run, g.streak, g.calm = 0, 0, 0
		return true
	case knee > was-step(was):
		g.holdAgain()
		return true
	}
	return false
}

// holdAgain holds the headroom again, twice as long: the knee was found where it was.
func (g *adaptive) holdAgain() {
	g.hold.longer()
	g.run, g.streak = 0, 0
	g.calm++
}

// begin starts a hold of a round at limit.
func (h *hold) begin(limit int) { h.on, h.at, h.rounds, h.left = true, limit, 1, 1 }

// longer starts the hold again for twice as many rounds as the last (at most
// holdMax).
func (h *hold) longer() {
	h.rounds = min(2*h.rounds, holdMax)
	h.left = h.rounds
}

// keep keeps the limit after a round that learned nothing about the knee below it;
// a lower window that was to go wide still does.
func (g *adaptive) keep(wide bool) {
	g.streak = 0
	if g.wide = wide; !wide {
		g.run = 0
	}
}

// settle moves the limit, down, to a headroom above knee (at least Min) and holds
// it there, rechecked after a round.
func (g *adaptive) settle(knee float64) {
	k := max(int(math.Round(knee)), 1)
	to := min(max(k+step(k), g.cfg.Min), g.limit)
	if g.cfg.Headroom > 0 {
		k = min(k, g.limit)
		to = min(max(k+g.headroom(k), g.cfg.Min), g.cfg.Max)
	}
	g.hold.head = max(to-k, 0)
	g.calm, g.wide, g.streak = 0, false, 0
	g.run, g.limit = min(to-g.limit, 0), to // up (a headroom wider than the fall) is no grow
	g.hold.begin(to)
	g.hold.recheck = false
	g.ref = 0
}

// headroom is the headroom asked for above a knee k (Headroom > 0).
func (g *adaptive) headroom(k int) int {
	return max(int(math.Ceil(float64(k)*g.cfg.Headroom)), 1)
}

// fall moves the limit down to to (at least Min), from a round whose lower window
// ran at lower: a fall all the way to it, or within a quarter of the way, makes
// the next lower window wide (the knee is likely lower still).
func (g *adaptive) fall(to, lower int) {
	to = max(to, g.cfg.Min)
	g.calm, g.wide = 0, to < g.limit && 4*(to-lower) <= g.limit-lower
	g.run, g.streak = to-g.limit, 1
	g.limit, g.hold.on = to, false
}

// raise grows the limit by a step; from the third grow in a row on, by twice the
// last; at most by half the limit.
func (g *adaptive) raise() {
	size, streak := step(g.limit), 1
	if g.run > 0 {
		streak = g.streak + 1
	}
	if streak > 2 {
		size = max(size, 2*g.run)
	}
	size = min(size, max(g.limit/2, 1))
	g.streak, g.wide = streak, false
	g.limit = min(max(g.limit+size, g.cfg.Min), g.cfg.Max)
	g.run = size
}

// window measures one window: the time-averaged handlers in flight, from when they
// reach its limit, and the mean duration of the requests admitted under it.
type window struct {
	since time.Time // its limit took force (rising: was reached): earlier admissions do not count
	from  time.Time // its measure begins (zero: no window yet)
	// toward: the handlers in flight have yet to reach its limit, from below
	// (1) or above (-1); the measure begins when they do, at the latest one mean
	// duration after since.
	toward int
	area   float64   // handlers in flight × time since from
	last   time.Time // the last change of the handlers in flight, cur
	cur    int
	sum    time.Duration
	n      int
	demand bool // the limit held a request back
}

// windowFigures is what a window measured.
type windowFigures struct {
	n, s   float64 // the time-averaged handlers in flight and their mean duration
	demand bool
}

// begun says whether the first window has begun.
func (w *window) begun() bool { return !w.from.IsZero() }

// begin begins a window whose limit took force at now. Its measure begins when the
// handlers in flight reach the limit (at once for a fall, whose admissions wait for
// that; for a rise, when the load has filled it), or at the latest after svc, the
// handler's mean duration; it counts only the requests admitted since the limit
// took force (for a rise, since it was reached).
func (w *window) begin(now time.Time, svc time.Duration, limit int) {
	w.since, w.from = now, now.Add(max(svc, time.Millisecond))
	w.area, w.sum, w.n, w.demand = 0, 0, 0, false
	switch {
	case w.cur == limit:
		w.from, w.toward = now, 0
	case w.cur < limit:
		w.toward = 1
	default:
		w.toward = -1
	}
}

// inFlight records that n handlers run from now on, under limit.
func (w *window) inFlight(now time.Time, n, limit int) {
	if w.toward != 0 && now.Before(w.from) && (n-limit)*w.toward >= 0 {
		// The handlers in flight reached the window's limit: its measure
		// begins; rising, with the requests admitted from now on, which wait
		// behind as many as it lets into the handler.
		if w.toward > 0 {
			w.since = now
		}
		w.from, w.toward = now, 0
	}
	if w.begun() && now.After(w.from) {
		from := w.from
		if w.last.After(from) {
			from = w.last
		}
		w.area += float64(w.cur) * float64(now.Sub(from))
	}
	w.cur, w.last = n, now
}

// counts says whether a request admitted at began (zero: not known) and ending at
// now counts in the window: one admitted under the previous window's limit waited
// behind the handlers that limit let in, and measures that one.
func (w *window) counts(now, began time.Time) bool {
	return !now.Before(w.from) && (began.IsZero() || !began.Before(w.since))
}

// add counts a request that took took.
func (w *window) add(took time.Duration) {
	w.sum += took
	w.n++
}

// mean is the mean duration of the requests counted.
func (w *window) mean() float64 { return float64(w.sum) / float64(w.n) }

// close ends the window at now, under limit, and returns its figures.
func (w *window) close(now time.Time, limit int) windowFigures {
	span := now.Sub(w.from)
	w.inFlight(now, w.cur, limit) // close the area at now
	return windowFigures{n: w.area / float64(span), s: w.mean(), demand: w.demand}
}
