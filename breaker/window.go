package breaker

import "sync/atomic"

// counts are the outcomes of one bucket, or of the whole window.
type counts struct {
	calls, failures, slow uint32 // calls counts successes and failures; neutral outcomes are not kept
}

// window counts outcomes over a sliding time window cut into buckets. Times are
// nanoseconds since the circuit's epoch.
//
// Plain successes, the closed path's common case, are counted without a lock in
// fast: one word per bucket holding the bucket's number modulo 2⁴⁰ (stampBits; with
// 1 s buckets, 35 000 years) above its count (countBits, saturating at 16.7 million a
// bucket). Everything else (failures, slow calls) is counted under the owner's lock
// (circuit.mu), which also serialises advance, reset and trips.
type window struct {
	width int64    // nanoseconds per bucket
	head  int64    // number of the newest bucket
	ring  []counts // bucket b lives at ring[b % len(ring)]
	total counts   // of ring, not of fast
	fast  []atomic.Uint64
}

const (
	countBits = 24
	countMax  = 1<<countBits - 1
	stampMask = 1<<(64-countBits) - 1
)

// stampOf is bucket b's stamp in a fast slot.
func stampOf(b int64) uint64 { return uint64(b) & stampMask }

// age is how many buckets stamp s is older than stamp head, modulo 2⁴⁰: negative
// (in two's complement of 40 bits) when s is newer.
func age(head, s uint64) int64 { return int64((head-s)&stampMask<<countBits) >> countBits }

func newWindow(length int64, buckets int) window {
	return window{
		width: max(length/int64(buckets), 1),
		ring:  make([]counts, buckets),
		fast:  make([]atomic.Uint64, buckets),
	}
}

// advance moves the window to time ns, dropping the buckets that leave it. A time
// older than the newest bucket counts in the newest bucket.
func (w *window) advance(ns int64) {
	b := max(ns, 0) / w.width
	if b <= w.head {
		return
	}
	n := int64(len(w.ring))
	if b-w.head >= n {
		clear(w.ring)
		w.total = counts{}
	} else {
		for k := w.head + 1; k <= b; k++ {
			c := &w.ring[k%n]
			w.total.calls -= c.calls
			w.total.failures -= c.failures
			w.total.slow -= c.slow
			*c = counts{}
		}
	}
	w.head = b
	w.dropFast()
}

// dropFast empties the fast slots of buckets that have left the window ending at
// w.head. A slot a concurrent addSuccess has just moved on is left alone.
func (w *window) dropFast() {
	n, head := int64(len(w.fast)), stampOf(w.head)
	for i := range w.fast {
		v := w.fast[i].Load()
		if a := age(head, v>>countBits); v != 0 && a >= n {
			w.fast[i].CompareAndSwap(v, 0)
		}
	}
}

// reset empties the window. A success counted concurrently by addSuccess may survive
// it: a count off by one, never a lost failure.
func (w *window) reset() {
	clear(w.ring)
	w.total = counts{}
	for i := range w.fast {
		w.fast[i].Store(0)
	}
}

// add counts one failure, or one slow call, at time ns. The owner's lock is held.
func (w *window) add(ns int64, failure, slow bool) {
	w.advance(ns)
	c := &w.ring[w.head%int64(len(w.ring))]
	c.calls++
	w.total.calls++
	if failure {
		c.failures++
		w.total.failures++
	}
	if slow {
		c.slow++
		w.total.slow++
	}
}

// addSuccess counts one plain success at time ns, without the owner's lock.
func (w *window) addSuccess(ns int64) {
	b := max(ns, 0) / w.width
	stamp := stampOf(b)
	s := &w.fast[b%int64(len(w.fast))]
	for {
		v := s.Load()
		nv := v + 1
		if a := age(stamp, v>>countBits); a > 0 {
			nv = stamp<<countBits | 1 // the slot held an older bucket: start this one
		} else if v&countMax == countMax {
			return // saturated
		}
		if s.CompareAndSwap(v, nv) {
			return
		}
	}
}

// successes returns the plain successes counted in the buckets of the window ending
// at w.head (and in any newer bucket a concurrent addSuccess has started).
func (w *window) successes() uint32 {
	n, head := int64(len(w.fast)), stampOf(w.head)
	var sum uint32
	for i := range w.fast {
		v := w.fast[i].Load()
		if age(head, v>>countBits) < n {
			sum += uint32(v & countMax)
		}
	}
	return sum
}

// totals returns the window's counts at time ns, plain successes included. The
// owner's lock is held.
func (w *window) totals(ns int64) counts {
	w.advance(ns)
	t := w.total
	t.calls += w.successes()
	return t
}

// trips reports whether counts t open the breaker: at least minCalls counted, and a
// failure ratio above failureRatio or a slow-call ratio above slowRatio (slowRatio
// checked only when slow calls are counted at all).
func trips(t counts, minCalls int, failureRatio float64, slowOn bool, slowRatio float64) bool {
	if t.calls == 0 || int64(t.calls) < int64(minCalls) {
		return false
	}
	n := float64(t.calls)
	return float64(t.failures) > failureRatio*n || slowOn && float64(t.slow) > slowRatio*n
}
