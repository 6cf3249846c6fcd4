package record

import (
	"context"
	"sync"
	"time"

	"github.com/deadlinekit/deadlinekit/otelattr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// dedupInstruments are package dedup's, made on first use like the others.
type dedupInstrumentSet struct {
	outcomes metric.Int64Counter
	wait     metric.Float64Histogram
	store    metric.Float64Histogram
}

var dedupInstruments = sync.OnceValue(func() *dedupInstrumentSet { return newDedupInstruments(otel.GetMeterProvider()) })

func newDedupInstruments(mp metric.MeterProvider) *dedupInstrumentSet {
	m := mp.Meter(otelattr.ScopeName)
	s := &dedupInstrumentSet{}
	s.outcomes = counter(m, "deadlinekit.dedup.outcomes")
	s.wait = histogram(m, "deadlinekit.dedup.wait")
	s.store = histogram(m, "deadlinekit.dedup.store.duration")
	return s
}

// dedupOptions are the attribute sets of the known outcomes and operations, made
// once, so that counting does not allocate.
var dedupOutcomeOptions, dedupStoreOptions = func() (map[string][]metric.AddOption, map[string][]metric.RecordOption) {
	a := map[string][]metric.AddOption{}
	for _, o := range values(otelattr.DedupOutcomeKey) {
		a[o] = []metric.AddOption{metric.WithAttributes(otelattr.DedupOutcomeKey.String(o))}
	}
	r := map[string][]metric.RecordOption{}
	for _, o := range values(otelattr.DedupStoreOpKey) {
		r[o] = []metric.RecordOption{metric.WithAttributes(otelattr.DedupStoreOpKey.String(o))}
	}
	return a, r
}()

func (s *dedupInstrumentSet) addOption(v string) []metric.AddOption {
	if o, ok := dedupOutcomeOptions[v]; ok {
		return o
	}
	return []metric.AddOption{metric.WithAttributes(otelattr.DedupOutcomeKey.String(v))}
}

func (s *dedupInstrumentSet) recordOption(v string) []metric.RecordOption {
	if o, ok := dedupStoreOptions[v]; ok {
		return o
	}
	return []metric.RecordOption{metric.WithAttributes(otelattr.DedupStoreOpKey.String(v))}
}

// Dedup records what deduplication did with a keyed request on the server span in
// ctx (outcome, the wait, and err as the span's status when the store failed), and
// counts it in deadlinekit.dedup.outcomes; a wait goes in deadlinekit.dedup.wait.
func Dedup(ctx context.Context, outcome string, waited time.Duration, err error) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(otelattr.DedupOutcomeKey.String(outcome))
		if waited > 0 {
			span.SetAttributes(otelattr.DedupWaitKey.Float64(millis(waited)))
		}
		if err != nil && outcome == "store_unavailable" {
			span.SetStatus(codes.Error, "dedup store: "+err.Error())
		}
	}
	s := dedupInstruments()
	s.outcomes.Add(ctx, 1, s.addOption(outcome)...)
	if waited > 0 {
		s.wait.Record(ctx, waited.Seconds())
	}
}

// DedupStoreEnabled reports whether deadlinekit.dedup.store.duration takes
// measurements in ctx: without a meter provider that measures it, a store call need
// not be timed (two clock reads around an in-memory call are a tenth of its cost).
func DedupStoreEnabled(ctx context.Context) bool {
	return dedupInstruments().store.Enabled(ctx)
}

// DedupStore records the latency of one store operation in
// deadlinekit.dedup.store.duration.
func DedupStore(ctx context.Context, op string, d time.Duration) {
	s := dedupInstruments()
	s.store.Record(ctx, d.Seconds(), s.recordOption(op)...)
}
