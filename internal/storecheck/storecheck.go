// Package storecheck checks a [dedup.Store] against its contract, for the tests of
// every store (dedup's MemoryStore, dedup/redisstore). Only tests import it.
//
// [Run] drives a fresh store from several goroutines with a seeded random sequence
// of Acquire, Complete, Release, Get and Wait over a few keys (leases that are
// completed, released, abandoned until they end, finished twice; Complete and
// Release with tokens that hold nothing; short leases and retentions, so that
// records end while the run goes on), records every call with when it started and
// returned, and then judges the whole history. What it holds a store to:
//
//   - a key's lease is held by at most one token at a time: while a lease surely
//     holds (acquired, not finished, its TTL not yet run out), every call sees it
//     Running with its fingerprint, and no other Acquire takes the key;
//   - Complete and Release act only with the lease's token, once: with any other
//     token, after the lease ended, or a second time, they return
//     [dedup.ErrLeaseLost]; with the token of a lease that surely holds, they
//     succeed;
//   - a completed answer is returned byte-equal, with its lease's fingerprint, by
//     Acquire, Get and Wait until its retention ends, and no call sees an answer
//     whose Complete failed;
//   - a record whose lease or retention surely ended is Absent, and Left never
//     says more time than the record has;
//   - Wait never returns a Running record, and returns (rather than waiting out
//     its context) once the record stopped running, unless another lease began.
//
// Time is either the caller's real time, with short TTLs ([WithUnit]) and a
// tolerance for a store's clock and its polling ([WithSlack]), or the fake time of
// a testing/synctest bubble ([FakeTime]), for a store in the process. A failure
// prints the seed; STORECHECK_SEED=n runs that seed again. The seed fixes each
// goroutine's operations; their interleaving is the scheduler's, so with more than
// one goroutine a seed usually, not always, replays a failure ([WithGoroutines](1)
// replays it exactly).
package storecheck

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/dedup"
)

// SeedEnv names the environment variable that sets the seed of every Run.
const SeedEnv = "STORECHECK_SEED"

// Option configures [Run].
type Option func(*config)

type config struct {
	seed       uint64
	seeded     bool
	goroutines int
	ops        int
	keys       int
	unit       time.Duration
	slack      time.Duration
	notice     time.Duration
	fake       bool
}

// WithSeed sets the seed (default: a new one per run). [SeedEnv] overrides it.
func WithSeed(seed uint64) Option { return func(c *config) { c.seed, c.seeded = seed, true } }

// WithGoroutines sets how many goroutines call the store at once. Default 4.
func WithGoroutines(n int) Option { return func(c *config) { c.goroutines = max(n, 1) } }

// WithOps sets how many operations each goroutine does. Default 150.
func WithOps(n int) Option { return func(c *config) { c.ops = max(n, 1) } }

// WithKeys sets how many keys the goroutines share. Default 3.
func WithKeys(n int) Option { return func(c *config) { c.keys = max(n, 1) } }

// WithUnit sets the time scale: TTLs and retentions are 1 to 6 units, pauses a
// few. Default 20 ms (a second under [FakeTime]).
func WithUnit(d time.Duration) Option { return func(c *config) { c.unit = max(d, time.Millisecond) } }

// WithSlack sets how far the store's clock may lag the checker's in real time: a
// record may outlive its end by this much (Redis rounds TTLs up to the
// millisecond, and the goroutines of a loaded machine wake late), and Wait may
// notice that a record stopped running this much later than [WithNotice] says.
// Default 20 ms; zero under [FakeTime].
func WithSlack(d time.Duration) Option { return func(c *config) { c.slack = max(d, 0) } }

// WithNotice sets how late Wait may notice that a record stopped running (beyond
// the slack): a store that polls may take its longest pause. Default 50 ms, the
// longest pause of [dedup.PollWait]. A store that is woken, like dedup's
// MemoryStore, may be held to zero.
func WithNotice(d time.Duration) Option { return func(c *config) { c.notice = max(d, 0) } }

// FakeTime runs the check in a testing/synctest bubble: the store is made inside
// it, and time moves only when every goroutine waits. For stores in the process.
func FakeTime() Option { return func(c *config) { c.fake = true } }

func newConfig(opts []Option) config {
	c := config{goroutines: 4, ops: 150, keys: 3, slack: -1, notice: 50 * time.Millisecond}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if v := os.Getenv(SeedEnv); v != "" {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			c.seed, c.seeded = n, true
		}
	}
	if !c.seeded {
		c.seed = rand.Uint64()
	}
	switch {
	case c.unit == 0 && c.fake:
		c.unit = time.Second
	case c.unit == 0:
		c.unit = 20 * time.Millisecond
	}
	switch {
	case c.fake:
		c.slack = 0
	case c.slack < 0:
		c.slack = 20 * time.Millisecond
	}
	return c
}

// Run checks the store newStore returns (one per call of Run) against the
// contract of [dedup.Store], and fails t with the broken rules, the history of
// the key that broke one first, and the seed.
func Run(t *testing.T, newStore func(t *testing.T) dedup.Store, opts ...Option) {
	t.Helper()
	c := newConfig(opts)
	report := func(t *testing.T, h *history) {
		t.Helper()
		v := check(&c, h)
		t.Logf("storecheck: seed %d: %s", c.seed, h.summary())
		if len(v) == 0 {
			return
		}
		for i, x := range v {
			if i == 10 {
				t.Errorf("… and %d more", len(v)-i)
				break
			}
			t.Error(x.msg)
		}
		t.Logf("history of key %q up to the first:\n%s", v[0].key, h.dump(&c, v[0], 60))
		t.Errorf("storecheck: seed %d; run it again with %s=%d", c.seed, SeedEnv, c.seed)
	}
	if c.fake {
		synctest.Test(t, func(t *testing.T) { report(t, drive(&c, newStore(t))) })
		return
	}
	report(t, drive(&c, newStore(t)))
}

// kind is an operation on the store.
type kind uint8

const (
	opAcquire kind = iota
	opComplete
	opRelease
	opGet
	opWait
)

func (k kind) String() string {
	return [...]string{"Acquire", "Complete", "Release", "Get", "Wait"}[k]
}

// stamp is when something happened: seq orders events in real time (an event
// whose seq is lower happened before), at is the clock's reading.
type stamp struct {
	seq int64
	at  time.Time
}

// op is one call and its result.
type op struct {
	kind       kind
	g          int
	key, token string
	fp         string        // Acquire
	ttl        time.Duration // Acquire
	answer     []byte        // Complete
	retain     time.Duration // Complete
	deadline   time.Time     // Wait
	start, end stamp
	acquired   bool
	entry      dedup.Entry
	err        error
}

// history is every call of a run.
type history struct {
	mu    sync.Mutex
	seq   atomic.Int64
	ops   []*op
	start time.Time
	// lags is how late the machine woke a goroutine, sampled while the
	// goroutines ran (real time only): see [history.lag].
	lags []lag
}

// lag is one sample of the machine's lateness: a goroutine that asked to wake
// lagTick after its start woke late this much later, at at.
type lag struct {
	at   time.Time
	late time.Duration
}

// lagTick is how often the lateness is sampled.
const lagTick = 2 * time.Millisecond

// sampleLag records the machine's lateness in h until stop is closed: on a
// loaded machine every goroutine wakes late, the store's and the Waits' too,
// and a check of how soon something is noticed allows for what was measured.
func (h *history) sampleLag(stop <-chan struct{}) {
	for {
		start := time.Now()
		select {
		case <-stop:
			return
		case <-time.After(lagTick):
		}
		if now := time.Now(); now.Sub(start) > lagTick {
			h.lags = append(h.lags, lag{at: now, late: now.Sub(start) - lagTick})
		}
	}
}

// lag is the longest lateness sampled in a wake-up that overlapped [from, to]:
// how much later than asked a goroutine may have noticed something then.
func (h *history) lag(from, to time.Time) time.Duration {
	var most time.Duration
	for _, l := range h.lags {
		if l.at.Before(from) || l.at.Add(-lagTick-l.late).After(to) {
			continue
		}
		most = max(most, l.late)
	}
	return most
}

func (h *history) now() stamp { return stamp{h.seq.Add(1), time.Now()} }

func (h *history) add(o *op) {
	h.mu.Lock()
	h.ops = append(h.ops, o)
	h.mu.Unlock()
}

// drive runs the goroutines against s and returns their history.
func drive(c *config, s dedup.Store) *history {
	h := &history{start: time.Now()}
	keys := make([]string, c.keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("storecheck-%d-%d", c.seed%1000, i)
	}
	var wg sync.WaitGroup
	for g := range c.goroutines {
		d := &driver{c: c, s: s, h: h, g: g, keys: keys, rng: rand.New(rand.NewPCG(c.seed, uint64(g)))}
		wg.Go(d.run)
	}
	if !c.fake {
		stop, sampled := make(chan struct{}), make(chan struct{})
		go func() { defer close(sampled); h.sampleLag(stop) }()
		defer func() { close(stop); <-sampled }()
	}
	wg.Wait()
	return h
}

// driver is one goroutine's sequence of operations.
type driver struct {
	c    *config
	s    dedup.Store
	h    *history
	g, n int
	keys []string
	rng  *rand.Rand
}

// units returns a random duration of lo to hi units, not on a whole unit, so that
// ends rarely fall on the same instant under fake time.
func (d *driver) units(lo, hi int) time.Duration {
	return time.Duration(lo+d.rng.IntN(hi-lo+1))*d.c.unit + time.Duration(d.rng.Int64N(int64(d.c.unit)/2))
}

func (d *driver) token() string {
	d.n++
	return fmt.Sprintf("g%d.%d", d.g, d.n)
}

func (d *driver) run() {
	for range d.c.ops {
		key := d.keys[d.rng.IntN(len(d.keys))]
		switch x := d.rng.IntN(100); {
		case x < 40:
			d.acquire(key)
		case x < 55:
			d.call(&op{kind: opGet, key: key})
		case x < 70:
			d.call(&op{kind: opWait, key: key, deadline: time.Now().Add(d.units(0, 8))})
		case x < 80: // a token that holds nothing
			d.finish(key, d.token(), d.rng.IntN(2) == 0)
		default:
			time.Sleep(d.units(0, 2))
		}
	}
}

// acquire tries to take key and, when it did, holds it for a while and then
// completes it, releases it or abandons it; sometimes it finishes twice.
func (d *driver) acquire(key string) {
	tok := d.token()
	o := d.call(&op{kind: opAcquire, key: key, token: tok, fp: "fp:" + tok, ttl: d.units(1, 6)})
	if !o.acquired {
		return
	}
	if d.rng.IntN(3) > 0 {
		time.Sleep(d.units(0, 7)) // at times past the lease's end
	}
	if d.rng.IntN(8) == 0 {
		return // abandoned: the lease ends by itself
	}
	complete := d.rng.IntN(3) > 0
	d.finish(key, tok, complete)
	if d.rng.IntN(6) == 0 {
		d.finish(key, tok, complete || d.rng.IntN(2) == 0)
	}
}

// finish completes or releases key's lease with tok.
func (d *driver) finish(key, tok string, complete bool) {
	if !complete {
		d.call(&op{kind: opRelease, key: key, token: tok})
		return
	}
	answer := make([]byte, len(tok)+1+d.rng.IntN(40))
	copy(answer, tok+"|")
	for i := len(tok) + 1; i < len(answer); i++ {
		answer[i] = byte(d.rng.Uint32()) // any byte: \n, \x00, invalid UTF-8
	}
	d.call(&op{kind: opComplete, key: key, token: tok, answer: answer, retain: d.units(1, 5)})
}

// call makes o's call and records it.
func (d *driver) call(o *op) *op {
	o.g = d.g
	ctx := context.Background()
	if o.kind == opWait {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, o.deadline)
		defer cancel()
	}
	o.start = d.h.now()
	switch o.kind {
	case opAcquire:
		o.acquired, o.entry, o.err = d.s.Acquire(ctx, o.key, dedup.Lease{Token: o.token, Fingerprint: o.fp, TTL: o.ttl})
	case opComplete:
		// The store may keep the answer: give it its own copy, keep ours.
		o.err = d.s.Complete(ctx, o.key, o.token, append([]byte(nil), o.answer...), o.retain)
	case opRelease:
		o.err = d.s.Release(ctx, o.key, o.token)
	case opGet:
		o.entry, o.err = d.s.Get(ctx, o.key)
	case opWait:
		o.entry, o.err = d.s.Wait(ctx, o.key)
	}
	o.end = d.h.now()
	if o.err != nil && !errors.Is(o.err, dedup.ErrLeaseLost) && !errors.Is(o.err, context.DeadlineExceeded) {
		time.Sleep(d.c.unit) // a store that fails: do not spin
	}
	d.h.add(o)
	return o
}
