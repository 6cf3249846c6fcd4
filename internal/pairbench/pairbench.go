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
// latency of each (bare-µs, with-µs) and the difference of the medians (added-%).
// Allocation figures, when reported, are for one base call plus one with call.
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
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
