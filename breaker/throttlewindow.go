package breaker

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deadlinekit/deadlinekit/criticality"
)

// throttle is one circuit's counts, over a sliding window of buckets. Times are ns
// since the circuit's epoch.
//
// A healthy target's calls, the common case, take no lock: an accept is an atomic
// addition to its level's running count (acc), which the head bucket takes in when
// the window moves on, and a call finds in one load (pending) that the window holds
// nothing but accepts, when no level is throttled. The lock is taken to move the
// window on, to count a refusal (the target's, or the throttle's own), and to
// decide while the window holds one.
type throttle struct {
	mu    sync.Mutex
	width int64
	head  int64                 // the newest bucket's number
	ring  [][levels]levelCounts // the head bucket's accepts since it began are not in it: acc − base
	total [levels]levelCounts   // of ring
	// acc counts, per level, every accept since the circuit was made; base is acc
	// as the head bucket began (under mu).
	acc  [levels]atomic.Uint64
	base [levels]uint64
	// next is when (ns) the head bucket ends: a call at or after it moves the
	// window on before counting.
	next atomic.Int64
	// pending is the number of requests in the window that are not accepts, of
	// all levels (the target's refusals and the throttle's own): while it is 0
	// every level's requests are its accepts, and no call is throttled. Written
	// under mu.
	pending atomic.Int64
	// mark is, per level, what the level's run (the calls the target has accepted
	// since it last refused one, as the level weighs them: accepts of it and the
	// levels below, refusals of it and the levels above) counts from: run[i] =
	// acc[0] + … + acc[i] − mark[i]. proof is the run that shows the target no
	// longer refuses (acceptRun).
	mark  [levels]uint64
	proof uint64
}

func newThrottle(t *Throttle) *throttle {
	th := &throttle{
		width: max(int64(t.Window)/int64(t.Buckets), 1),
		ring:  make([][levels]levelCounts, t.Buckets),
		proof: uint64(acceptRun(t.K)),
	}
	th.next.Store(th.width)
	return th
}

// recoveryOdds are the odds against a target that still refuses what the throttle
// lets through passing for one that no longer refuses: acceptRun's run of accepts
// happens by chance less than once in recoveryOdds.
const recoveryOdds = 1000

// acceptRun returns how many calls in a row a target must accept before the
// throttle takes it as no longer refusing: a target the throttle holds back refuses
// at least 1 − 1/k of what it is sent, so that it accepts n in a row with
// probability at most k^−n; n is the least with k^n ≥ recoveryOdds (10 for k = 2,
// 73 for 1.1). With k = 1 no run suffices.
func acceptRun(k float64) uint32 {
	if k <= 1 {
		return math.MaxUint32
	}
	return uint32(min(math.Ceil(math.Log(recoveryOdds)/math.Log(k)), math.MaxUint32))
}

// run returns level i's run of accepts. th.mu is held.
func (th *throttle) run(i int) uint64 {
	var n uint64
	for j := 0; j <= i; j++ {
		n += th.acc[j].Load()
	}
	return n - th.mark[i]
}

// settle takes the head bucket's accepts counted without the lock into its counts
// and the total. th.mu is held.
func (th *throttle) settle() {
	c := &th.ring[th.head%int64(len(th.ring))]
	for i := range c {
		a := th.acc[i].Load()
		n := uint32(a - th.base[i])
		th.base[i] = a
		c[i].requests += n
		c[i].accepts += n
		th.total[i].requests += n
		th.total[i].accepts += n
	}
}

// advance moves the window to ns. th.mu is held.
func (th *throttle) advance(ns int64) {
	b := max(ns, 0) / th.width
	if b <= th.head {
		return
	}
	th.settle()
	n := int64(len(th.ring))
	if b-th.head >= n {
		clear(th.ring)
		th.total = [levels]levelCounts{}
	} else {
		th.closed(&th.ring[th.head%n])
		for k := th.head + 1; k <= b; k++ {
			c := &th.ring[k%n]
			for i := range c {
				th.total[i].requests -= c[i].requests
				th.total[i].accepts -= c[i].accepts
				th.total[i].refusals -= c[i].refusals
			}
			*c = [levels]levelCounts{}
		}
	}
	th.head = b
	th.next.Store((b + 1) * th.width)
	th.tally()
}

// tally sets pending from the total. th.mu is held.
func (th *throttle) tally() {
	var p int64
	for _, t := range th.total {
		p += int64(t.requests - t.accepts)
	}
	th.pending.Store(p)
}

// closed weighs bucket c, which has just ended: for each level the target has
// stopped refusing, the throttle's own refusals of that level are dropped from the
// window. th.mu is held. A level counts as no longer refused once the target has
// refused none of it in a whole bucket and accepted the last acceptRun calls of it
// in a row: a target still refusing as much as the throttle allows does both with
// odds below 1 in recoveryOdds; one that refuses in bursts within buckets (the
// first calls of each second accepted) never does.
//
// The dropped refusals were requests the target would have accepted: while it
// refuses, they make its callers send it about K times what it accepts; once it
// accepts all it is sent, they would keep the level throttled until its accepts
// outweighed them, which, each accept letting about K more calls through, takes
// longer than the window. The target's own answers stay: the calls sent over the
// window, about K times the accepts while it refused, throttle the level no more
// than they say.
func (th *throttle) closed(c *[levels]levelCounts) {
	refused := uint32(0) // refusals of the level and the levels above, in c
	for i := levels - 1; i >= 0; i-- {
		refused += c[i].refusals
		if refused != 0 || th.run(i) < th.proof {
			continue
		}
		t := &th.total[i]
		if t.requests == t.accepts+t.refusals {
			continue
		}
		for k := range th.ring {
			r := &th.ring[k][i]
			r.requests = r.accepts + r.refusals
		}
		t.requests = t.accepts + t.refusals
	}
}

// clean reports whether the window holds nothing but accepts: no call is throttled.
func (th *throttle) clean() bool { return th.pending.Load() == 0 }

// decide returns the probability of a local refusal of a call of level i at ns,
// and whether a draw of random refuses it (there is none when the probability is
// 0); a refused call is counted as a request.
func (th *throttle) decide(cfg *Throttle, ns int64, i int, random func() float64) (float64, bool) {
	th.mu.Lock()
	defer th.mu.Unlock()
	th.advance(ns)
	own := th.total
	for j := range own {
		n := uint32(th.acc[j].Load() - th.base[j])
		own[j].requests += n
		own[j].accepts += n
	}
	p := cfg.Probability(effective(&own, i))
	if p == 0 || random() >= p {
		return p, false
	}
	th.ring[th.head%int64(len(th.ring))][i].requests++
	th.total[i].requests++
	th.pending.Add(1)
	return p, true
}

// verdicts of a call's answer, for the throttle.
const (
	uncounted = iota
	accepted
	refusedForLoad
)

// count adds a sent call's verdict v at level i at ns. An accept takes the lock
// only when the window has to move on.
func (th *throttle) count(ns int64, i, v int) {
	switch v {
	case uncounted:
		return
	case accepted:
		if ns >= th.next.Load() {
			th.mu.Lock()
			th.advance(ns)
			th.mu.Unlock()
		}
		th.acc[i].Add(1)
		return
	}
	th.mu.Lock()
	th.advance(ns)
	c, t := &th.ring[th.head%int64(len(th.ring))][i], &th.total[i]
	c.requests++
	t.requests++
	c.refusals++
	t.refusals++
	th.pending.Add(1)
	var sum uint64
	for j := 0; j <= i; j++ {
		sum += th.acc[j].Load()
		th.mark[j] = sum
	}
	th.mu.Unlock()
}

// snapshot returns the effective counts and probabilities of every level at ns.
func (th *throttle) snapshot(cfg *Throttle, ns int64) []ThrottleLevel {
	th.mu.Lock()
	defer th.mu.Unlock()
	th.advance(ns)
	th.settle()
	out := make([]ThrottleLevel, levels)
	for i := range out {
		r, a := effective(&th.total, i)
		out[i] = ThrottleLevel{Level: criticality.Sheddable + criticality.Level(i), Requests: r, Accepts: a, Probability: cfg.Probability(r, a)}
	}
	return out
}

// throttled applies the adaptive throttle of c, when it has one, to the call t
// admitted in the closed state: a refusal (a *ThrottledError), or nil with t set to
// count the call's answer. While the window holds nothing but accepts it reads
// neither the call's level nor a random number.
func (b *Breaker) throttled(ctx context.Context, c *circuit, t *ticket) error {
	th := c.thr
	if th == nil || t.unthrottled {
		return nil
	}
	if th.clean() {
		t.counted = true
		return nil
	}
	lvl := criticality.From(ctx)
	p, refuse := th.decide(b.cfg.throttle, t.start, levelIndex(lvl), b.cfg.random)
	if !refuse {
		t.counted = true
		if p > 0 {
			c.tel.RecordThrottle(ctx, lvl.String(), p, false)
		}
		return nil
	}
	b.throttledN.Add(1)
	c.tel.RecordThrottle(ctx, lvl.String(), p, true)
	return &ThrottledError{Target: c.name, Level: lvl, Probability: p, RetryAfter: time.Duration(th.width)}
}
