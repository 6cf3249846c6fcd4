package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// The pauses of the health state: after a call to a Redis fails (or does not answer
// within [WithTimeout]), the store fails every lease and lookup on it at once
// for FirstPause (completions and releases are still tried);
// then one call at a time (a probe) goes to Redis: its success lets traffic back,
// its failure doubles the pause, up to MaxPause. MaxPause is half a second so that
// a Redis back from an outage is found within that: keyed requests wait for the
// next probe (dedup.WithStoreWait), and a second of budget spent on a Redis already
// back is most of a payment's retry; two probes a second cost a dead Redis nothing.
//
// A probe first opens a connection of its own to Redis, with the client's dialer,
// outside the client's pool; when that connection is refused (Redis is not
// running), the probe goes no further and the pause stays FirstPause: a refused
// connection costs nothing, and a Redis that restarts is found within FirstPause.
const (
	FirstPause = 100 * time.Millisecond
	MaxPause   = 500 * time.Millisecond
)

// health is what the store knows of one Redis (a single node, or one master of a
// Cluster): up, or down until a probe succeeds. Its zero value is up.
type health struct {
	down    atomic.Bool  // read alone on the fast path
	lastOK  atomic.Int64 // when a call last succeeded (UnixNano)
	mu      sync.Mutex
	pause   time.Duration // the current pause, while down
	until   time.Time     // no probe before
	probing bool          // a probe is out
	// reach, when not nil, opens a connection to this Redis outside the client's
	// pool, and closes it: a call admitted while down tries it first.
	reach func(context.Context) error
}

// verdicts of a call, for [health.done].
type outcome uint8

const (
	succeeded  outcome = iota // Redis answered
	failedCall                // Redis failed, or did not answer within the bound
	neutral                   // nothing learnt (the caller left first)
	refused                   // Redis refused a connection: it is not running
)

// admit says whether a call may go to Redis at now: at once while up; while down,
// one probe at a time once the pause has passed. A call refused gets the time until
// the next probe may go.
func (h *health) admit(now time.Time) (probe bool, retryIn time.Duration, ok bool) {
	if !h.down.Load() {
		return false, 0, true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down.Load() {
		return false, 0, true
	}
	if h.probing {
		// The probe answers within the bound; if it fails, the next one goes a
		// pause later.
		return false, FirstPause, false
	}
	if now.Before(h.until) {
		return false, h.wait(now), false
	}
	h.probing = true
	return true, 0, true
}

// done records how a call admitted at probe ended at now, and returns the time
// until the next probe when Redis is down.
func (h *health) done(probe bool, o outcome, now time.Time) time.Duration {
	if o == succeeded {
		if n := now.UnixNano(); h.lastOK.Load() < n {
			h.lastOK.Store(n)
		}
	}
	if o == succeeded && !probe && !h.down.Load() {
		return 0 // the fast path
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if probe {
		h.probing = false
	}
	switch {
	case o == succeeded && (probe || !h.down.Load()):
		h.down.Store(false)
		h.pause = 0
	case (o == failedCall || o == refused) && !h.down.Load():
		h.down.Store(true)
		h.pause = FirstPause
		h.until = now.Add(h.pause)
	case o == failedCall && probe:
		h.pause = min(2*h.pause, MaxPause)
		h.until = now.Add(h.pause)
	case o == refused && probe:
		// Refused at the door: the next probe costs Redis nothing either.
		h.pause = FirstPause
		h.until = now.Add(h.pause)
	}
	// A call admitted before Redis was seen down says nothing more of it: the
	// probe decides.
	if !h.down.Load() {
		return 0
	}
	return max(h.wait(now), 0)
}

// timedOut is the outcome of a call started at start that reached its bound: a
// failure, unless another call succeeded since it started (Redis answers: this
// call was slow, on a loaded machine or behind a large answer).
func (h *health) timedOut(start time.Time) outcome {
	if h.lastOK.Load() > start.UnixNano() {
		return neutral
	}
	return failedCall
}

// retryIn is the time until the next probe may go, while down (at least 1 ms:
// zero would read as "unknown").
func (h *health) retryIn(now time.Time) time.Duration {
	if !h.down.Load() {
		return time.Millisecond
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.probing {
		return FirstPause
	}
	return max(h.wait(now), time.Millisecond)
}

// wait is the time from now until the next probe, at most the current pause: now
// may have been read before another call's failure, read later, set h.until (its
// caller waited for h.mu meanwhile), and the next probe is never more than a
// pause away. h.mu is held.
func (h *health) wait(now time.Time) time.Duration {
	return min(h.until.Sub(now), h.pause)
}
