package breaker

// counts are the outcomes of one bucket, or of the whole window.
type counts struct {
	calls, failures, slow uint32 // calls counts successes and failures; neutral outcomes are not kept
}

// window counts outcomes over a sliding time window cut into buckets. Times are
// nanoseconds since the circuit's epoch. Its owner serialises access (circuit.mu).
type window struct {
	width int64    // nanoseconds per bucket
	head  int64    // number of the newest bucket
	ring  []counts // bucket b lives at ring[b % len(ring)]
	total counts
}

func newWindow(length int64, buckets int) window {
	return window{width: max(length/int64(buckets), 1), ring: make([]counts, buckets)}
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
		w.reset()
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
}

func (w *window) reset() {
	clear(w.ring)
	w.total = counts{}
}

// add counts one success or failure (slow or not) at time ns.
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

// trips reports whether the window's counts open the breaker: at least minCalls
// counted, and a failure ratio above failureRatio or a slow-call ratio above slowRatio
// (slowRatio checked only when slow calls are counted at all).
func (w *window) trips(minCalls int, failureRatio float64, slowOn bool, slowRatio float64) bool {
	t := w.total
	if t.calls == 0 || int64(t.calls) < int64(minCalls) {
		return false
	}
	n := float64(t.calls)
	return float64(t.failures) > failureRatio*n || slowOn && float64(t.slow) > slowRatio*n
}
