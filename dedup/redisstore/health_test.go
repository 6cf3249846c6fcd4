package redisstore

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestHealthPauses: after a failure every call fails fast for FirstPause; then one
// probe at a time goes; a failed probe doubles the pause up to MaxPause; a probe
// that succeeds lets every call through again.
func TestHealthPauses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h health
		if _, _, ok := h.admit(time.Now()); !ok {
			t.Fatal("a new health refuses")
		}
		if in := h.done(false, failedCall, time.Now()); in != FirstPause {
			t.Fatalf("after a failure: next try in %v, want %v", in, FirstPause)
		}
		time.Sleep(FirstPause / 2)
		if _, in, ok := h.admit(time.Now()); ok || in != FirstPause/2 {
			t.Fatalf("within the pause: admitted %v, retry in %v, want refused, %v", ok, in, FirstPause/2)
		}
		// A call admitted before the failure that fails too changes nothing.
		h.done(false, failedCall, time.Now())
		time.Sleep(FirstPause / 2)
		want := FirstPause
		for range 6 {
			probe, _, ok := h.admit(time.Now())
			if !ok || !probe {
				t.Fatalf("after the pause: probe %v admitted %v, want a probe", probe, ok)
			}
			if _, _, ok := h.admit(time.Now()); ok {
				t.Fatal("a second call admitted while the probe is out")
			}
			want = min(2*want, MaxPause)
			if in := h.done(true, failedCall, time.Now()); in != want {
				t.Fatalf("failed probe: next in %v, want %v", in, want)
			}
			time.Sleep(want)
		}
		probe, _, ok := h.admit(time.Now())
		if !ok || !probe {
			t.Fatal("no probe after the longest pause")
		}
		// A probe whose caller left (nothing learnt) lets the next call probe.
		h.done(true, neutral, time.Now())
		probe, _, ok = h.admit(time.Now())
		if !ok || !probe {
			t.Fatal("no probe after a neutral one")
		}
		if in := h.done(true, succeeded, time.Now()); in != 0 {
			t.Fatalf("after a good probe: next in %v", in)
		}
		for range 3 {
			if probe, _, ok := h.admit(time.Now()); !ok || probe {
				t.Fatal("up again, but calls are refused or probes")
			}
		}
		// Down again: the pause starts over.
		if in := h.done(false, failedCall, time.Now()); in != FirstPause {
			t.Fatalf("down again: next in %v, want %v", in, FirstPause)
		}
	})
}

// TestHealthSlowCallWhileOthersSucceed: a call that reaches its bound marks Redis
// down only if no other call succeeded since it started: Redis that answers others
// is up, and the call was slow.
func TestHealthSlowCallWhileOthersSucceed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h health
		start := time.Now()
		time.Sleep(time.Millisecond)
		h.done(false, succeeded, time.Now())
		if o := h.timedOut(start); o != neutral {
			t.Fatalf("slow call while another succeeded: %v, want neutral", o)
		}
		time.Sleep(time.Millisecond)
		if o := h.timedOut(time.Now()); o != failedCall {
			t.Fatalf("a call that no success followed: %v, want a failure", o)
		}
	})
}

// TestHealthRefusedProbes: a probe refused at the door (Redis not running) keeps
// the pause at FirstPause however long Redis stays down, and after probes that
// reached Redis and failed (the pause grown), brings it back to FirstPause; a dial
// refused while up marks Redis down as a failed call does.
func TestHealthRefusedProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h health
		if in := h.done(false, refused, time.Now()); in != FirstPause {
			t.Fatalf("a refused dial while up: next try in %v, want %v", in, FirstPause)
		}
		for i := range 10 {
			time.Sleep(FirstPause)
			probe, _, ok := h.admit(time.Now())
			if !ok || !probe {
				t.Fatalf("probe %d: not admitted a FirstPause after a refused one", i)
			}
			if in := h.done(true, refused, time.Now()); in != FirstPause {
				t.Fatalf("refused probe %d: next in %v, want %v", i, in, FirstPause)
			}
		}
		// Redis accepts connections but fails (a paused Redis): the pause grows.
		for _, want := range []time.Duration{2 * FirstPause, 4 * FirstPause, MaxPause} {
			time.Sleep(time.Until(time.Now().Add(h.retryIn(time.Now()))))
			probe, _, _ := h.admit(time.Now())
			if in := h.done(probe, failedCall, time.Now()); !probe || in != want {
				t.Fatalf("failed probe: next in %v, want %v", in, want)
			}
		}
		time.Sleep(MaxPause)
		probe, _, _ := h.admit(time.Now())
		if in := h.done(probe, refused, time.Now()); !probe || in != FirstPause {
			t.Fatalf("refused after failed probes: next in %v, want %v", in, FirstPause)
		}
		// A refused dial of a call admitted before changes nothing.
		time.Sleep(FirstPause / 2)
		if in := h.done(false, refused, time.Now()); in != FirstPause/2 {
			t.Fatalf("a refused dial while down: next in %v, want %v", in, FirstPause/2)
		}
	})
}

// TestHealthRetryInNeverExceedsThePause: a caller reads the clock, then waits for
// the lock while another call's failure (read a little later) sets the next probe's
// time; the caller is told to come back within the pause, not the pause plus the
// time it waited for the lock (CI saw "next probe in 100.3ms" against FirstPause).
func TestHealthRetryInNeverExceedsThePause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h health
		before := time.Now()
		<-time.After(5 * time.Millisecond)
		h.done(false, failedCall, time.Now())
		if _, in, ok := h.admit(before); ok || in > FirstPause {
			t.Fatalf("admit with a clock read before the failure: admitted %v, retry in %v, want refused within %v", ok, in, FirstPause)
		}
		h.mu.Lock()
		h.until = time.Now().Add(h.pause) // as a failure read after the caller's clock
		h.mu.Unlock()
		if in := h.retryIn(before); in > FirstPause {
			t.Fatalf("retryIn with a clock read before the failure: %v, want within %v", in, FirstPause)
		}
	})
}
