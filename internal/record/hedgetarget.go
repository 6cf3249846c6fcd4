package record

import (
	"context"
	"sync"

	"github.com/deadlinekit/deadlinekit/otelattr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// hedgeOutcomes is package hedge's per-target counter, made on first use like the
// other instruments.
var hedgeOutcomes = sync.OnceValue(func() metric.Int64Counter { return newHedgeOutcomes(otel.GetMeterProvider()) })

func newHedgeOutcomes(mp metric.MeterProvider) metric.Int64Counter {
	return counter(mp.Meter(otelattr.ScopeName), "deadlinekit.hedge.outcomes")
}

// HedgeTarget records the hedges sent to one target in deadlinekit.hedge.outcomes.
// Its attribute sets are made once, by [NewHedgeTarget], so that counting does not
// allocate. The number of targets is bounded by the hedging layer; a nil
// *HedgeTarget does nothing.
type HedgeTarget struct {
	won, wasted []metric.AddOption
}

// NewHedgeTarget returns the recorder of the hedges sent to target.
func NewHedgeTarget(target string) *HedgeTarget {
	t := otelattr.HedgeTargetKey.String(target)
	return &HedgeTarget{
		won:    []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(t, otelattr.HedgeOutcomeKey.String("won")))},
		wasted: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(t, otelattr.HedgeOutcomeKey.String("wasted")))},
	}
}

// Hedges counts the hedges a call sent, once it has ended: one won when won (a
// hedge's success is the call's), the others wasted.
func (t *HedgeTarget) Hedges(ctx context.Context, sent int, won bool) {
	if t == nil || sent <= 0 {
		return
	}
	c := hedgeOutcomes()
	if won {
		c.Add(ctx, 1, t.won...)
		sent--
	}
	if sent > 0 {
		c.Add(ctx, int64(sent), t.wasted...)
	}
}
