// Package pairbench measures the cost a layer adds to a call on a shared machine: the
// call with and without the layer run alternately in one benchmark loop, the order
// flipping every iteration, and the medians of each compared. Drift and neighbours
// then hit both variants alike, which separate benchmark runs cannot promise. Running
// the same call on both sides reads about 0%.
package pairbench

import (
	"slices"
	"testing"
	"time"
)

// Run calls base and with alternately, b.N times each, and reports the median
// latency of each (bare-µs, with-µs) and the difference of the medians (added-%),
// and the difference of their 10th percentiles (p10-added-%, of the base's).
// Allocation figures, when reported, are for one base call plus one with call.
//
// On a loopback call the two can tell different stories. A call's latency there
// has modes (whether a thread had to be woken for its answer, say), and the median
// falls between them: a cost moves it by more than the cost itself, or not at all,
// as the mix of modes shifts. The 10th percentile is in the fastest mode, where a
// cost adds about what it costs.
func Run(b *testing.B, base, with func() error) {
	var tb, tw []time.Duration
	timed := func(f func() error, into *[]time.Duration) {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		*into = append(*into, time.Since(start))
	}
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			timed(base, &tb)
			timed(with, &tw)
		} else {
			timed(with, &tw)
			timed(base, &tb)
		}
		i++
	}
	mb, mw := median(tb), median(tw)
	b.ReportMetric(float64(mb)/1e3, "bare-µs")
	b.ReportMetric(float64(mw)/1e3, "with-µs")
	b.ReportMetric(100*float64(mw-mb)/float64(mb), "added-%")
	if fb := quantile(tb, 0.1); fb > 0 {
		b.ReportMetric(100*float64(quantile(tw, 0.1)-fb)/float64(fb), "p10-added-%")
	}
}

func median(ds []time.Duration) time.Duration { return quantile(ds, 0.5) }

// quantile is the q-quantile of ds (the ⌊q·n⌋-th smallest), 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(q*float64(len(s)))]
}
