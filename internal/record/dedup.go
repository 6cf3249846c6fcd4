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

var dedupInstruments = sync.OnceValue(func() *dedupInstrumentSet {
	m := otel.GetMeterProvider().Meter(otelattr.ScopeName)
	s := &dedupInstrumentSet{}
	s.outcomes, _ = m.Int64Counter("deadlinekit.dedup.outcomes",
		metric.WithUnit("{request}"), metric.WithDescription("Keyed requests, by what deduplication did with them."))
	s.wait, _ = m.Float64Histogram("deadlinekit.dedup.wait",
		metric.WithUnit("s"), metric.WithDescription("Time repeats waited for the first request's answer."))
	s.store, _ = m.Float64Histogram("deadlinekit.dedup.store.duration",
		metric.WithUnit("s"), metric.WithDescription("Latency of the deduplication store's operations."))
	return s
})

// dedupOptions are the attribute sets of the known outcomes and operations, made
// once, so that counting does not allocate.
var dedupOutcomeOptions, dedupStoreOptions = func() (map[string][]metric.AddOption, map[string][]metric.RecordOption) {
	a := map[string][]metric.AddOption{}
	for _, o := range []string{"first", "replayed", "waited", "conflict", "mismatch", "released", "store_unavailable", "malformed", "not_kept", "canceled"} {
		a[o] = []metric.AddOption{metric.WithAttributes(otelattr.DedupOutcomeKey.String(o))}
	}
	r := map[string][]metric.RecordOption{}
	for _, o := range []string{"acquire", "complete", "release", "wait", "get"} {
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

// DedupStore records the latency of one store operation in
// deadlinekit.dedup.store.duration.
func DedupStore(ctx context.Context, op string, d time.Duration) {
	s := dedupInstruments()
	s.store.Record(ctx, d.Seconds(), s.recordOption(op)...)
}
