package hedge_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/metrictest"
	"github.com/deadlinekit/deadlinekit/otelattr"
)

// The hedges sent to a target are counted per target, won or wasted, as hedgedhttp's
// users ask: one call whose hedge answers first (won), one whose primary answers
// after its hedge went out (wasted), one that ends before its delay (no hedge).
func TestHedgeOutcomesPerTarget(t *testing.T) {
	reader := metrictest.Global()
	total := func(outcome string) float64 {
		return metrictest.Total(t, reader, "deadlinekit.hedge.outcomes",
			otelattr.HedgeTargetKey.String("backend.test"), otelattr.HedgeOutcomeKey.String(outcome))
	}
	won0, wasted0 := total("won"), total("wasted")
	synctest.Test(t, func(t *testing.T) {
		lat := map[int][2]time.Duration{ // call: primary, hedge
			1: {time.Second, 5 * time.Millisecond},
			2: {15 * time.Millisecond, time.Second},
			3: {5 * time.Millisecond, time.Second},
		}
		var call atomic.Int64
		b := &latencyBackend{latency: func(attempt, _ int) time.Duration { return lat[int(call.Load())][attempt] }}
		d := 10 * time.Millisecond
		rt := hedge.NewTransport(b, hedge.WithDelay(hedge.Delay{Initial: d, Min: d, Max: d, MinSamples: 1 << 30}))
		for i := range 3 {
			call.Store(int64(i + 1))
			if got := get(context.Background(), rt); got == "" {
				t.Fatalf("call %d: empty answer", i+1)
			}
			synctest.Wait()
		}
	})
	if won, wasted := total("won")-won0, total("wasted")-wasted0; won != 1 || wasted != 1 {
		t.Errorf("hedges to backend.test: %v won, %v wasted; want 1 and 1", won, wasted)
	}
}
