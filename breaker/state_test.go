package breaker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var (
	errFail    = errors.New("fail")
	errNeutral = errors.New("neutral")
)

// byErr classifies the test calls by their error.
func byErr(r Result) Outcome {
	switch r.Err {
	case errFail:
		return Failure
	case errNeutral:
		return Neutral
	}
	return Success
}

// fixed is a test breaker whose sleeps have no jitter, classifying by byErr. It trips
// on the window's ratios only, unless opts set WithConsecutiveFailures.
func fixed(opts ...Option) *Breaker {
	return New(append([]Option{WithClassifier(byErr), withRandom(func() float64 { return 0.5 }), WithConsecutiveFailures(0)}, opts...)...)
}

// do runs one call to target taking took, ending with err. It returns the refusal.
func do(b *Breaker, target string, took time.Duration, err error) error {
	return doCtx(context.Background(), b, target, took, err)
}

func doCtx(ctx context.Context, b *Breaker, target string, took time.Duration, err error) error {
	c := b.circuit(key{kind: keyCustom, b: target})
	var t ticket
	if e := b.admit(ctx, c, &t); e != nil {
		return e
	}
	time.Sleep(took)
	b.done(ctx, &t, &Result{Err: err})
	return nil
}

// calls runs n calls, failing the first fails of them; it fails the test when one is
// refused.
func calls(t *testing.T, b *Breaker, target string, n, fails int) {
	t.Helper()
	for i := range n {
		var err error
		if i < fails {
			err = errFail
		}
		if e := do(b, target, time.Millisecond, err); e != nil {
			t.Fatalf("call %d of %d refused: %v", i+1, n, e)
		}
	}
}

func wantState(t *testing.T, b *Breaker, target string, want State) {
	t.Helper()
	if got := b.State(target); got != want {
		t.Fatalf("state of %s = %v, want %v", target, got, want)
	}
}

func TestOpensAtMinCallsAboveRatio(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := fixed()
		calls(t, b, "a", DefaultMinCalls-1, DefaultMinCalls-1) // all failures, one call short
		wantState(t, b, "a", Closed)
		calls(t, b, "a", 1, 1)
		wantState(t, b, "a", Open)
		err := do(b, "a", 0, nil)
		var oe *OpenError
		if !errors.As(err, &oe) || !errors.Is(err, ErrOpen) || oe.Target != "a" || oe.State != Open {
			t.Fatalf("refusal = %#v", err)
		}
		// It opened when the 20th call ended, and the refused call came at once.
		if oe.RetryAfter != DefaultSleep.First {
			t.Fatalf("RetryAfter = %v, want %v", oe.RetryAfter, DefaultSleep.First)
		}
		if s := b.Stats(); s.Failures != 20 || s.Refused != 1 || s.Opens != 1 {
			t.Fatalf("stats = %+v", s)
		}
	})
}

func TestRatioIsStrictlyAbove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := fixed(WithMinCalls(10), WithFailureRatio(0.6))
		calls(t, b, "a", 10, 6) // 60%: not above
		wantState(t, b, "a", Closed)
		calls(t, b, "a", 1, 1) // 7 of 11
		wantState(t, b, "a", Open)
	})
}

func TestNeutralNeverCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := fixed(WithMinCalls(5))
		for range 500 {
			if err := do(b, "a", time.Millisecond, errNeutral); err != nil {
				t.Fatal(err)
			}
		}
		calls(t, b, "a", 4, 4)
		wantState(t, b, "a", Closed) // 4 failures, below the minimum: the 500 did not count
		if c, _ := b.Circuit("a"); c.Calls != 4 || c.Failures != 4 {
			t.Fatalf("circuit = %+v", c)
		}
	})
}

func TestWindowBucketsAgeOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := fixed(WithMinCalls(20), WithWindow(10*time.Second, 10))
		calls(t, b, "a", 15, 15)
		// 9 s later the first bucket is still in the window: 5 more failures open it.
		time.Sleep(9*time.Second - 15*time.Millisecond)
		if c, _ := b.Circuit("a"); c.Calls != 15 {
			t.Fatalf("after 9 s the window holds %d calls, want 15", c.Calls)
		}
		calls(t, b, "a", 5, 5)
		wantState(t, b, "a", Open)

		b = fixed(WithMinCalls(20), WithWindow(10*time.Second, 10))
		calls(t, b, "a", 15, 15)
		// 10 s later the bucket of the first 15 has left the window.
		time.Sleep(10 * time.Second)
		if c, _ := b.Circuit("a"); c.Calls != 0 {
			t.Fatalf("after 10 s the window holds %d calls, want 0", c.Calls)
		}
		calls(t, b, "a", 19, 19)
		wantState(t, b, "a", Closed)
	})
}

func TestWindowSlides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := fixed(WithMinCalls(1000), WithWindow(4*time.Second, 4))
		for range 8 { // one call per second, at 0.5 s into each bucket
			time.Sleep(500 * time.Millisecond)
			calls(t, b, "a", 1, 1)
			time.Sleep(500*time.Millisecond - time.Millisecond)
		}
		if c, _ := b.Circuit("a"); c.Calls != 4 || c.Failures != 4 {
			t.Fatalf("a 4-bucket window holds %+v, want the last 4 calls", c)
		}
	})
}

func TestSlowCallRatio(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := fixed(WithMinCalls(10), WithSlowCall(100*time.Millisecond, 0.5))
		for i := range 10 {
			took := 10 * time.Millisecond
			if i < 5 {
				took = 150 * time.Millisecond // successes, but slow
			}
			if err := do(b, "a", took, nil); err != nil {
				t.Fatal(err)
			}
		}
		wantState(t, b, "a", Closed) // 5 of 10 slow: not above half
		if err := do(b, "a", 101*time.Millisecond, nil); err != nil {
			t.Fatal(err)
		}
		wantState(t, b, "a", Open) // 6 of 11
		if s := b.Stats(); s.Slow != 6 || s.Successes != 11 || s.Failures != 0 {
			t.Fatalf("stats = %+v", s)
		}
	})
}

func TestSlowCallOffByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := fixed(WithMinCalls(5))
		for range 50 {
			if err := do(b, "a", time.Hour, nil); err != nil {
				t.Fatal(err)
			}
		}
		wantState(t, b, "a", Closed)
	})
}

// openNow opens target's circuit of b with minCalls failures.
func openNow(t *testing.T, b *Breaker, target string) {
	t.Helper()
	calls(t, b, target, b.cfg.minCalls, b.cfg.minCalls)
	wantState(t, b, target, Open)
}

// halfOpen returns a breaker (min calls 5, sleep 1 s, and opts) whose circuit "a"
// has opened and slept: the next call is a probe. Call it in a synctest bubble.
func halfOpen(t *testing.T, opts ...Option) *Breaker {
	t.Helper()
	b := fixed(append([]Option{WithMinCalls(5), WithOpenFor(time.Second)}, opts...)...)
	openNow(t, b, "a")
	time.Sleep(time.Second)
	return b
}

func TestHalfOpenProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := fixed(WithMinCalls(5), WithOpenFor(2*time.Second), WithProbes(3))
		openNow(t, b, "a")
		time.Sleep(2*time.Second - time.Nanosecond)
		if err := do(b, "a", 0, nil); !errors.Is(err, ErrOpen) {
			t.Fatalf("before the sleep's end: %v, want refused", err)
		}
		time.Sleep(time.Nanosecond)
		wantState(t, b, "a", HalfOpen)

		// Three probes in flight at once; a fourth call is refused.
		c := b.circuit(key{kind: keyCustom, b: "a"})
		var ts [3]ticket
		for i := range ts {
			if err := b.admit(context.Background(), c, &ts[i]); err != nil || !ts[i].probe {
				t.Fatalf("probe %d: %v (probe %v)", i, err, ts[i].probe)
			}
		}
		err := do(b, "a", 0, nil)
		var oe *OpenError
		if !errors.As(err, &oe) || oe.State != HalfOpen || oe.RetryAfter != 2*time.Second {
			t.Fatalf("fourth call in half-open: %#v", err)
		}
		for i := range ts {
			wantState(t, b, "a", HalfOpen)
			b.done(context.Background(), &ts[i], &Result{})
		}
		wantState(t, b, "a", Closed)
		if s := b.Stats(); s.Probes != 3 {
			t.Fatalf("probes = %d, want 3", s.Probes)
		}
		// Closed again with a fresh window: the old failures do not count.
		calls(t, b, "a", 4, 4)
		wantState(t, b, "a", Closed)
	})
}

func TestNeutralProbeFreesItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := halfOpen(t, WithProbes(1))
		for range 10 { // probes whose callers gave up: they say nothing
			if err := do(b, "a", time.Millisecond, errNeutral); err != nil {
				t.Fatal(err)
			}
			wantState(t, b, "a", HalfOpen)
		}
		if err := do(b, "a", time.Millisecond, nil); err != nil {
			t.Fatal(err)
		}
		wantState(t, b, "a", Closed)
	})
}

func TestFailedProbeReopensWithAGrowingSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := fixed(WithMinCalls(5), WithSleep(Sleep{First: time.Second, Max: 10 * time.Second, Factor: 2}))
		openNow(t, b, "a")
		want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
		for i, w := range want {
			c, _ := b.Circuit("a")
			if c.State != Open || c.RetryAfter != w {
				t.Fatalf("opening %d: %+v, want open for %v", i+1, c, w)
			}
			time.Sleep(w)
			if err := do(b, "a", 0, errFail); err != nil { // the probe fails
				t.Fatalf("opening %d: probe refused: %v", i+1, err)
			}
		}
		// A successful round of probes closes it, and the next opening starts over.
		time.Sleep(10 * time.Second)
		for range DefaultProbes {
			if err := do(b, "a", 0, nil); err != nil {
				t.Fatal(err)
			}
		}
		wantState(t, b, "a", Closed)
		openNow(t, b, "a")
		if c, _ := b.Circuit("a"); c.RetryAfter != time.Second {
			t.Fatalf("after closing, the sleep is %v, want the first again", c.RetryAfter)
		}
	})
}

func TestSlowProbeReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := halfOpen(t, WithSlowCall(100*time.Millisecond, 0.5))
		if err := do(b, "a", 200*time.Millisecond, nil); err != nil {
			t.Fatal(err)
		}
		wantState(t, b, "a", Open)
	})
}

func TestLostProbesAreGivenUpAfterASleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := halfOpen(t, WithProbes(1))
		c := b.circuit(key{kind: keyCustom, b: "a"})
		var lost ticket
		if err := b.admit(context.Background(), c, &lost); err != nil {
			t.Fatal(err)
		}
		if err := do(b, "a", 0, nil); !errors.Is(err, ErrOpen) {
			t.Fatalf("second probe while the first is out: %v", err)
		}
		time.Sleep(time.Second)
		if err := do(b, "a", 0, nil); err != nil { // the lost one is given up on
			t.Fatal(err)
		}
		wantState(t, b, "a", Closed)
		// The lost probe's late failure is stale: it does not reopen the circuit.
		b.done(context.Background(), &lost, &Result{Err: errFail})
		wantState(t, b, "a", Closed)
	})
}

func TestStaleOutcomesDoNotCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := fixed(WithMinCalls(5), WithOpenFor(time.Second), WithProbes(1))
		c := b.circuit(key{kind: keyCustom, b: "a"})
		var late [10]ticket // admitted while closed, back after the circuit opened
		for i := range late {
			if err := b.admit(context.Background(), c, &late[i]); err != nil {
				t.Fatal(err)
			}
		}
		openNow(t, b, "a")
		time.Sleep(time.Second)
		if err := do(b, "a", 0, nil); err != nil {
			t.Fatal(err)
		}
		wantState(t, b, "a", Closed)
		for i := range late {
			b.done(context.Background(), &late[i], &Result{Err: errFail})
		}
		if cs, _ := b.Circuit("a"); cs.State != Closed || cs.Calls != 0 {
			t.Fatalf("late outcomes counted: %+v", cs)
		}
	})
}

func TestTargetsAreIndependent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := fixed(WithMinCalls(5))
		for range 50 {
			if err := do(b, "dead", 0, errFail); err != nil && !errors.Is(err, ErrOpen) {
				t.Fatal(err)
			}
			if err := do(b, "healthy", 0, nil); err != nil {
				t.Fatalf("healthy refused: %v", err)
			}
		}
		wantState(t, b, "dead", Open)
		wantState(t, b, "healthy", Closed)
	})
}

func TestMaxTargets(t *testing.T) {
	b := fixed()
	for i := range MaxTargets + 10 {
		c := b.circuit(key{kind: keyCustom, b: string(rune('a'+i%26)) + time.Duration(i).String()})
		if i < MaxTargets && c == nil || i >= MaxTargets && c != nil {
			t.Fatalf("target %d: circuit %v", i, c)
		}
	}
	if s := b.Stats(); s.Targets != MaxTargets || s.Untracked != 10 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestStateChangesWithoutCalls(t *testing.T) {
	// The state a snapshot reads moves with time, though nothing runs.
	synctest.Test(t, func(t *testing.T) {
		b := fixed(WithMinCalls(5), WithOpenFor(time.Second))
		openNow(t, b, "a")
		time.Sleep(time.Second)
		wantState(t, b, "a", HalfOpen)
	})
}

func TestConsecutiveFailuresOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := fixed(WithConsecutiveFailures(5), WithMinCalls(1000))
		calls(t, b, "a", 100, 0) // a window full of successes: the ratio stays far below
		calls(t, b, "a", 4, 4)
		calls(t, b, "a", 1, 0) // a success ends the run
		calls(t, b, "a", 4, 4)
		wantState(t, b, "a", Closed)
		for range 50 { // neutral outcomes do not end it
			if err := do(b, "a", time.Millisecond, errNeutral); err != nil {
				t.Fatal(err)
			}
		}
		calls(t, b, "a", 1, 1)
		wantState(t, b, "a", Open)

		// After the circuit closes again, a run starts from nothing.
		time.Sleep(DefaultSleep.First)
		calls(t, b, "a", DefaultProbes, 0)
		wantState(t, b, "a", Closed)
		calls(t, b, "a", 4, 4)
		wantState(t, b, "a", Closed)
		calls(t, b, "a", 1, 1)
		wantState(t, b, "a", Open)
	})
}

func TestConsecutiveFailuresByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(WithClassifier(byErr))
		calls(t, b, "a", 1000, 0)
		calls(t, b, "a", DefaultConsecutiveFailures-1, DefaultConsecutiveFailures-1)
		wantState(t, b, "a", Closed)
		calls(t, b, "a", 1, 1)
		wantState(t, b, "a", Open)

		off := New(WithClassifier(byErr), WithConsecutiveFailures(0))
		calls(t, off, "a", 100, 0)
		calls(t, off, "a", 150, 150) // 150 of 250: not above 60%
		wantState(t, off, "a", Closed)
		calls(t, off, "a", 1, 1)
		wantState(t, off, "a", Open)
	})
}

func TestSuccessesAgeOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := fixed(WithMinCalls(20), WithWindow(10*time.Second, 10))
		calls(t, b, "a", 100, 0)
		if c, _ := b.Circuit("a"); c.Calls != 100 {
			t.Fatalf("window holds %d calls, want 100", c.Calls)
		}
		// 10 s later the successes have left the window: 20 failures make 100%.
		time.Sleep(10 * time.Second)
		if c, _ := b.Circuit("a"); c.Calls != 0 {
			t.Fatalf("after 10 s the window holds %d calls, want 0", c.Calls)
		}
		calls(t, b, "a", 19, 19)
		wantState(t, b, "a", Closed)
		calls(t, b, "a", 1, 1)
		wantState(t, b, "a", Open)
	})
}

// TestConcurrentOutcomesAddUp counts successes (without the lock) and failures (with
// it) from many goroutines at once: the window holds every one of them.
func TestConcurrentOutcomesAddUp(t *testing.T) {
	b := fixed(WithMinCalls(1 << 30))
	c := b.circuit(key{kind: keyCustom, b: "a"})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				var t ticket
				if err := b.admit(context.Background(), c, &t); err != nil {
					panic(err)
				}
				var err error
				if (g+i)%3 == 0 {
					err = errFail
				}
				b.done(context.Background(), &t, &Result{Err: err})
			}
		}()
	}
	wg.Wait()
	got, _ := b.Circuit("a")
	if got.Calls != 4000 || uint64(got.Failures) != b.Stats().Failures {
		t.Fatalf("circuit = %+v, stats = %+v", got, b.Stats())
	}
}

func TestFastSlots(t *testing.T) {
	w := newWindow(10, 10) // buckets of 1 ns
	w.addSuccess(3)
	w.advance(3)
	if got := w.successes(); got != 1 {
		t.Fatalf("successes = %d, want 1", got)
	}
	// 2³² buckets later the slot is stale, not the same bucket again.
	w.advance(3 + 1<<32)
	if got := w.successes(); got != 0 {
		t.Fatalf("after 2³² buckets: successes = %d, want 0", got)
	}
	w.addSuccess(3 + 1<<32)
	w.addSuccess(5 + 1<<32) // a bucket ahead of head: counted
	if got := w.successes(); got != 2 {
		t.Fatalf("successes = %d, want 2", got)
	}
	// A full slot saturates instead of spilling into its stamp.
	const b = 3 + 1<<32
	w.fast[b%10].Store(stampOf(b)<<countBits | (countMax - 1))
	for range 3 {
		w.addSuccess(b)
	}
	if v := w.fast[b%10].Load(); v>>countBits != stampOf(b) || v&countMax != countMax {
		t.Fatalf("slot = %#x", v)
	}
	// Buckets that leave the window are dropped by advance.
	w.advance(20 + 1<<32)
	if got := w.successes(); got != 0 {
		t.Fatalf("after the window moved on: successes = %d, want 0", got)
	}
	for i := range w.fast {
		if v := w.fast[i].Load(); v != 0 {
			t.Fatalf("slot %d = %#x after the window moved on", i, v)
		}
	}
}

// A stream taken as the half-open probe is judged at its first answer: a healthy
// watch closes the circuit then, calls flow while it runs on, and its end (hours
// later, however it ends) is not counted. A probe stream that fails before any
// answer reopens the circuit when it ends.
func TestProbeStreamJudgedAtFirstAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := fixed(WithProbes(1), WithConsecutiveFailures(1))
		c := b.circuit(key{kind: keyCustom, b: "a"})
		stream := func() (*streamTicket, error) {
			st := &streamTicket{method: "/pkg.S/Watch"}
			st.t.stream = true
			return st, b.admit(ctx, c, &st.t)
		}
		calls(t, b, "a", 1, 1)
		wantState(t, b, "a", Open)
		time.Sleep(time.Hour) // past any sleep
		watch, err := stream()
		if err != nil || !watch.t.probe {
			t.Fatalf("the watch: %v, probe %v; want admitted as the probe", err, watch.t.probe)
		}
		if err := do(b, "a", 0, nil); err == nil {
			t.Fatal("a call admitted beside the one probe")
		}
		b.streamAnswered(ctx, watch)
		wantState(t, b, "a", Closed)
		calls(t, b, "a", 3, 0)
		time.Sleep(10 * time.Hour)
		before := b.Stats()
		b.streamEnded(ctx, watch, errFail, nil)
		if after := b.Stats(); after != before {
			t.Errorf("the watch's end was counted: %+v, then %+v", before, after)
		}
		wantState(t, b, "a", Closed)

		calls(t, b, "a", 1, 1)
		time.Sleep(time.Hour)
		dead, err := stream()
		if err != nil || !dead.t.probe {
			t.Fatalf("the second watch: %v, probe %v; want admitted as the probe", err, dead.t.probe)
		}
		b.streamEnded(ctx, dead, errFail, nil)
		wantState(t, b, "a", Open)
	})
}

// lostAnswer is a call whose answer never came: its deadline passed with a fair
// budget (no deadline at all here), which Classify counts as a failure.
var lostAnswers = []Result{
	{Err: context.DeadlineExceeded},
	{GRPC: true, Err: status.Error(codes.DeadlineExceeded, "context deadline exceeded")},
}

func TestLostProbeDoesNotLengthenTheSleep(t *testing.T) {
	for _, lost := range lostAnswers {
		synctest.Test(t, func(t *testing.T) {
			b := halfOpen(t, WithClassifier(Classify), WithProbes(1))
			c := b.circuit(key{kind: keyCustom, b: "a"})
			for i := range MaxLostProbes {
				var tk ticket
				if err := b.admit(context.Background(), c, &tk); err != nil {
					t.Fatalf("probe %d: %v", i+1, err)
				}
				r := lost
				b.done(context.Background(), &tk, &r)
				if i < MaxLostProbes-1 {
					// A lost answer says nothing of the target: the next probe may go.
					wantState(t, b, "a", HalfOpen)
				}
			}
			// The MaxLostProbes-th lost answer re-opens it, for the same sleep.
			if cs, _ := b.Circuit("a"); cs.State != Open || cs.RetryAfter != time.Second {
				t.Fatalf("after %d lost probes: %+v, want open for 1s (the same sleep)", MaxLostProbes, cs)
			}
			// A probe that fails outright still lengthens it.
			time.Sleep(time.Second)
			if err := do(b, "a", 0, errFail); err != nil {
				t.Fatal(err)
			}
			if cs, _ := b.Circuit("a"); cs.State != Open || cs.RetryAfter != 2*time.Second {
				t.Fatalf("after a failed probe: %+v, want open for 2s", cs)
			}
		})
	}
}

func TestGivenUpProbesAreLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := halfOpen(t, WithProbes(1))
		c := b.circuit(key{kind: keyCustom, b: "a"})
		for i := range MaxLostProbes {
			var tk ticket // never comes back
			if err := b.admit(context.Background(), c, &tk); err != nil {
				t.Fatalf("probe %d: %v", i+1, err)
			}
			time.Sleep(time.Second)
		}
		// The third given up re-opens the circuit for the same sleep.
		var tk ticket
		err := b.admit(context.Background(), c, &tk)
		var oe *OpenError
		if !errors.As(err, &oe) || oe.State != Open || oe.RetryAfter != time.Second {
			t.Fatalf("after %d probes given up: %v, want open for 1s", MaxLostProbes, err)
		}
	})
}
