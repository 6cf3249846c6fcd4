package hedge_test

import (
	"testing"

	"github.com/deadlinekit/deadlinekit/hedge"
)

// WithExtraLoad(e) hedges after the delay that spends e: the hedges sent are about
// that share of the primaries, the delay the (1 − e)-quantile.
func TestWithExtraLoadSpendsTheShare(t *testing.T) {
	for _, e := range []float64{0.02, 0.05, 0.1} {
		share, delay := extraLoadRun(t, 2000, hedge.WithExtraLoad(e))
		if share < 0.7*e || share > 1.3*e {
			t.Errorf("WithExtraLoad(%v): hedges per primary %.4f", e, share)
		}
		want := spreadQuantile(1 - e)
		if delay < want*96/100 || delay > want*104/100 {
			t.Errorf("WithExtraLoad(%v): delay %v; want about %v", e, delay, want)
		}
	}
}

// The cap bounds it: WithExtraLoad above WithMaxExtraLoad spends the cap, whatever
// the order of the options.
func TestWithExtraLoadBoundedByTheCap(t *testing.T) {
	for _, opts := range [][]hedge.Option{
		{hedge.WithExtraLoad(0.2), hedge.WithMaxExtraLoad(0.05)},
		{hedge.WithMaxExtraLoad(0.05), hedge.WithExtraLoad(0.2)},
	} {
		share, _ := extraLoadRun(t, 2000, opts...)
		if share < 0.035 || share > 0.065 {
			t.Errorf("extra load 0.2 under a cap of 0.05: hedges per primary %.4f", share)
		}
	}
}
