package storecheck

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/dedup"
)

// bug is a way a store breaks its contract.
type bug int

const (
	noBug bug = iota
	completeIgnoresToken
	releaseIgnoresToken
	leasesNeverEnd
	answersNeverEnd
	acquireOverAnswers
	flipsAByte
	waitReturnsRunning
	waitMissesTheEnd
	leftTooLong
)

var bugs = []struct {
	bug  bug
	name string
	want string // in a violation's message
}{
	{completeIgnoresToken, "Complete ignores the token", "succeeded"},
	{releaseIgnoresToken, "Release ignores the token", "succeeded"},
	{leasesNeverEnd, "leases never end", "after its TTL ran out"},
	{answersNeverEnd, "answers outlive their retention", "after its retention ended"},
	{acquireOverAnswers, "Acquire takes a key with an answer", "surely kept"},
	{flipsAByte, "Get changes a byte of the answer", "answer"},
	{waitReturnsRunning, "Wait returns a running record", "Wait returned a Running record"},
	{waitMissesTheEnd, "Wait sleeps through the end", "waited out its context"},
	{leftTooLong, "Left says more than the record has", "more than the record has"},
}

type rec struct {
	state     dedup.State
	token, fp string
	expires   time.Time
	answer    []byte
}

// naive is a Store on a map and one lock, with at most one bug.
type naive struct {
	bug bug
	mu  sync.Mutex
	m   map[string]*rec
}

func newNaive(b bug) *naive { return &naive{bug: b, m: map[string]*rec{}} }

func (s *naive) live(key string, now time.Time) *rec {
	r := s.m[key]
	if r != nil && !now.Before(r.expires) {
		delete(s.m, key)
		return nil
	}
	return r
}

func (s *naive) entry(r *rec, now time.Time) dedup.Entry {
	if r == nil {
		return dedup.Entry{}
	}
	e := dedup.Entry{State: r.state, Fingerprint: r.fp, Left: r.expires.Sub(now), Answer: r.answer}
	if s.bug == flipsAByte && len(e.Answer) > 0 {
		e.Answer = append([]byte(nil), e.Answer...)
		e.Answer[len(e.Answer)-1] ^= 1
	}
	if s.bug == leftTooLong {
		e.Left += time.Minute
	}
	return e
}

func (s *naive) Acquire(_ context.Context, key string, l dedup.Lease) (bool, dedup.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if r := s.live(key, now); r != nil && !(s.bug == acquireOverAnswers && r.state == dedup.Done) {
		return false, s.entry(r, now), nil
	}
	ttl := l.TTL
	if s.bug == leasesNeverEnd {
		ttl = 1000 * time.Hour
	}
	s.m[key] = &rec{state: dedup.Running, token: l.Token, fp: l.Fingerprint, expires: now.Add(ttl)}
	return true, dedup.Entry{}, nil
}

func (s *naive) finish(key, token string, blind bool) (*rec, error) {
	r := s.live(key, time.Now())
	if r == nil || r.state != dedup.Running || (r.token != token && !blind) {
		return nil, dedup.ErrLeaseLost
	}
	return r, nil
}

func (s *naive) Complete(_ context.Context, key, token string, answer []byte, retain time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.finish(key, token, s.bug == completeIgnoresToken)
	if err != nil {
		return err
	}
	if s.bug == answersNeverEnd {
		retain = 1000 * time.Hour
	}
	r.state, r.answer, r.expires = dedup.Done, answer, time.Now().Add(retain)
	return nil
}

func (s *naive) Release(_ context.Context, key, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.finish(key, token, s.bug == releaseIgnoresToken); err != nil {
		return err
	}
	delete(s.m, key)
	return nil
}

func (s *naive) Get(_ context.Context, key string) (dedup.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	return s.entry(s.live(key, now), now), nil
}

func (s *naive) Wait(ctx context.Context, key string) (dedup.Entry, error) {
	switch s.bug {
	case waitReturnsRunning:
		return s.Get(ctx, key)
	case waitMissesTheEnd:
		if e, err := s.Get(ctx, key); err != nil || e.State != dedup.Running {
			return e, err
		}
		<-ctx.Done()
		return dedup.Entry{}, ctx.Err()
	}
	return dedup.PollWait(ctx, s, key)
}

// tokenBlind is the MemoryStore behind a wrapper that completes whichever lease
// the key holds, whatever token it is given.
type tokenBlind struct {
	*dedup.MemoryStore
	mu   sync.Mutex
	last map[string]string
}

func (s *tokenBlind) Acquire(ctx context.Context, key string, l dedup.Lease) (bool, dedup.Entry, error) {
	ok, e, err := s.MemoryStore.Acquire(ctx, key, l)
	if ok {
		s.mu.Lock()
		s.last[key] = l.Token
		s.mu.Unlock()
	}
	return ok, e, err
}

func (s *tokenBlind) Complete(ctx context.Context, key, _ string, answer []byte, retain time.Duration) error {
	s.mu.Lock()
	tok := s.last[key]
	s.mu.Unlock()
	return s.MemoryStore.Complete(ctx, key, tok, answer, retain)
}

func newTokenBlind(*testing.T) dedup.Store {
	return &tokenBlind{MemoryStore: dedup.NewMemoryStore(), last: map[string]string{}}
}

// violations runs the check on a store under fake time and returns what it found.
func violations(t *testing.T, newStore func() dedup.Store, opts ...Option) []violation {
	c := newConfig(append([]Option{FakeTime()}, opts...))
	var v []violation
	synctest.Test(t, func(t *testing.T) { v = check(&c, drive(&c, newStore())) })
	return v
}

// TestCorrectStoresPass: a correct store breaks no rule, whatever the seed: the
// checker asserts only what is sure.
func TestCorrectStoresPass(t *testing.T) {
	for seed := range uint64(6) {
		for name, s := range map[string]func() dedup.Store{
			"naive":  func() dedup.Store { return newNaive(noBug) },
			"memory": func() dedup.Store { return dedup.NewMemoryStore() },
		} {
			notice := 50 * time.Millisecond // naive polls
			if name == "memory" {
				notice = 0 // woken at once
			}
			if v := violations(t, s, WithSeed(seed), WithNotice(notice)); len(v) > 0 {
				t.Errorf("%s, seed %d: %d violations, the first: %s", name, seed, len(v), v[0].msg)
			}
		}
	}
}

// TestCorrectStorePassesInRealTime: the same in real time, with short TTLs.
func TestCorrectStorePassesInRealTime(t *testing.T) {
	Run(t, func(*testing.T) dedup.Store { return newNaive(noBug) },
		WithUnit(5*time.Millisecond), WithOps(40), WithSlack(100*time.Millisecond))
	Run(t, func(*testing.T) dedup.Store { return dedup.NewMemoryStore() },
		WithUnit(5*time.Millisecond), WithOps(40), WithSlack(100*time.Millisecond))
}

// TestBrokenStoresFail: the checker catches each way of breaking the contract.
func TestBrokenStoresFail(t *testing.T) {
	for _, b := range bugs {
		var v []violation
		found := false
		for seed := uint64(1); seed <= 3 && !found; seed++ { // a seed may miss one, rarely
			v = violations(t, func() dedup.Store { return newNaive(b.bug) }, WithSeed(seed))
			for _, x := range v {
				found = found || strings.Contains(x.msg, b.want)
			}
		}
		if !found {
			t.Errorf("%s: not caught (%d violations, want one saying %q)", b.name, len(v), b.want)
			for i := range min(len(v), 3) {
				t.Log(v[i].msg)
			}
		}
	}
	v := violations(t, func() dedup.Store { return newTokenBlind(t) }, WithSeed(1))
	if len(v) == 0 {
		t.Error("a MemoryStore whose Complete ignores the token: not caught")
	} else {
		t.Logf("a MemoryStore whose Complete ignores the token: %d violations, the first: %s", len(v), v[0].msg)
	}
}

// TestRunFailsAndPrintsTheSeed runs Run on a broken store in a child process: it
// must fail and print the seed it was given, with how to run it again.
func TestRunFailsAndPrintsTheSeed(t *testing.T) {
	if os.Getenv("STORECHECK_CHILD") == "1" {
		Run(t, newTokenBlind, FakeTime())
		return
	}
	// synctest fixes the time of each step, not the order of goroutines woken at
	// the same instant, so one seed's history can miss the token-blind store's
	// violation now and then: a few seeds, each of whose failures must name it.
	var outs []string
	for seed := 4242; seed < 4247; seed++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRunFailsAndPrintsTheSeed$", "-test.v")
		cmd.Env = append(os.Environ(), "STORECHECK_CHILD=1", SeedEnv+"="+strconv.Itoa(seed))
		out, err := cmd.CombinedOutput()
		if err == nil {
			outs = append(outs, string(out))
			continue
		}
		want := fmt.Sprintf("seed %d; run it again with STORECHECK_SEED=%d", seed, seed)
		if !strings.Contains(string(out), want) {
			t.Fatalf("a broken store failed Run without %q: err %v, output:\n%s", want, err, out)
		}
		if strings.Contains(string(out), "succeeded with a token that holds no lease") {
			return
		}
		outs = append(outs, string(out))
	}
	t.Fatalf("a token-blind store passed Run, or failed it for another reason, on 5 seeds:\n%s", strings.Join(outs, "\n---\n"))
}

// TestLagCountsWakeUpsThatOverlap: the lateness allowed between two instants is
// the longest of the wake-ups that overlapped them, none other.
func TestLagCountsWakeUpsThatOverlap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	h := &history{lags: []lag{
		{at: at(10), late: 3 * time.Millisecond},  // asleep 5–10
		{at: at(40), late: 30 * time.Millisecond}, // asleep 8–40
		{at: at(100), late: time.Millisecond},     // asleep 97–100
	}}
	for _, c := range []struct {
		from, to int
		want     time.Duration
	}{
		{0, 4, 0},
		{0, 6, 3 * time.Millisecond},
		{11, 20, 30 * time.Millisecond},
		{41, 96, 0},
		{41, 99, time.Millisecond},
		{0, 200, 30 * time.Millisecond},
	} {
		if got := h.lag(at(c.from), at(c.to)); got != c.want {
			t.Errorf("lag(+%dms, +%dms) = %v, want %v", c.from, c.to, got, c.want)
		}
	}
}

// TestWaitStartedLateMayEndWithItsContext: a Wait on a record that stopped running
// long before it started must answer within notice (and the slack) of its own
// start, not of the stop: one whose context ends sooner (CI's run: 31 µs after
// its start, 100 ms after the record was completed) may end with it, while one
// given longer must not.
func TestWaitStartedLateMayEndWithItsContext(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms float64) stamp {
		return stamp{seq: int64(ms * 1000), at: t0.Add(time.Duration(ms * float64(time.Millisecond)))}
	}
	for _, c := range []struct {
		name   string
		budget time.Duration
		fails  bool
	}{
		{"context ended at once", 31 * time.Microsecond, false},
		{"context long enough to answer", 200 * time.Millisecond, true},
	} {
		acq := &op{kind: opAcquire, key: "k", token: "t", ttl: 120 * time.Millisecond, acquired: true, start: at(0), end: at(1)}
		done := &op{kind: opComplete, key: "k", token: "t", retain: 90 * time.Millisecond, start: at(5), end: at(6)}
		wait := &op{kind: opWait, key: "k", start: at(106), end: at(106.5), err: context.DeadlineExceeded}
		wait.deadline = wait.start.at.Add(c.budget)
		conf := newConfig(nil)
		v := check(&conf, &history{ops: []*op{acq, done, wait}, start: t0})
		if got := len(v) > 0; got != c.fails {
			t.Errorf("%s: %d violations %v; want a violation: %v", c.name, len(v), v, c.fails)
		}
	}
}
