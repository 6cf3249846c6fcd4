package admissioncmp

import (
	"slices"
	"testing"
	"time"
)

// A loaded machine drops ticks: the sample of a late tick must land at its own
// 10 ms slot, the slots it skipped holding the same reading, so that sample i is
// the reading at i × 10 ms into the measured part.
func TestSampleAtKeepsTheTimeAxis(t *testing.T) {
	from := time.Unix(100, 0)
	var conc []int64
	for _, tc := range []struct {
		after time.Duration
		v     int64
		want  []int64
	}{
		{-time.Millisecond, 9, nil},                        // before the measured part
		{3 * time.Millisecond, 4, []int64{4}},              // slot 0
		{13 * time.Millisecond, 5, []int64{4, 5}},          // slot 1
		{47 * time.Millisecond, 7, []int64{4, 5, 7, 7, 7}}, // ticks 2 and 3 dropped
		{48 * time.Millisecond, 8, []int64{4, 5, 7, 7, 7}}, // slot 4 already read
	} {
		conc = sampleAt(conc, from.UnixNano(), from.Add(tc.after).UnixNano(), tc.v)
		if !slices.Equal(conc, tc.want) {
			t.Fatalf("after %v: %v, want %v", tc.after, conc, tc.want)
		}
	}
}
