package admissioncmp

import (
	"runtime/metrics"
	"time"
)

// schedName is the runtime's histogram of the time goroutines spent ready to run
// before they ran: the wake-up a freed slot's next request waits, and longer
// when the process or its threads are not running (CPU steal, a neighbour).
const schedName = "/sched/latencies:seconds"

// schedSnapshot reads the histogram's counts so far.
func schedSnapshot() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedName}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// schedQuantile is the q-quantile (the upper bound of its bucket) of the
// scheduling latencies counted between two snapshots of the histogram.
func schedQuantile(before, after *metrics.Float64Histogram, q float64) time.Duration {
	if before == nil || after == nil || len(before.Counts) != len(after.Counts) {
		return 0
	}
	var total uint64
	for i := range after.Counts {
		total += after.Counts[i] - before.Counts[i]
	}
	if total == 0 {
		return 0
	}
	want := uint64(q * float64(total))
	var seen uint64
	for i := range after.Counts {
		seen += after.Counts[i] - before.Counts[i]
		if seen > want {
			hi := after.Buckets[i+1]
			if hi > 10 { // +Inf
				hi = after.Buckets[i]
			}
			return time.Duration(hi * float64(time.Second))
		}
	}
	return 0
}
