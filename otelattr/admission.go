package otelattr

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Admission attributes (package shortcircuit's concurrency limit), on the server span.
const (
	// AdmissionKey is what the concurrency limit did with the request: "admitted",
	// or the refusal ("cannot_finish", "dropped", "overloaded", "canceled").
	AdmissionKey = attribute.Key("deadlinekit.shortcircuit.admission")
	// QueuedKey is true when the request waited for a slot.
	QueuedKey = attribute.Key("deadlinekit.shortcircuit.queued")
	// QueueWaitKey is how long (ms) the request waited for a slot; for a refusal on
	// arrival, the wait that was predicted.
	QueueWaitKey = attribute.Key("deadlinekit.shortcircuit.queue_wait_ms")
	// ReasonKey is a refusal's reason on the deadlinekit.shortcircuit.rejections
	// metric: a shortcircuit decision ("below_floor", "expired", "cannot_finish", …).
	ReasonKey = attribute.Key("deadlinekit.shortcircuit.reason")
)

// RecordInFlight adds delta to deadlinekit.shortcircuit.in_flight, the handlers
// running under a concurrency limit.
func RecordInFlight(ctx context.Context, delta int) {
	if delta != 0 {
		instruments().inFlight.Add(ctx, int64(delta))
	}
}

// RecordQueueLength adds delta to deadlinekit.shortcircuit.queue_length.
func RecordQueueLength(ctx context.Context, delta int) {
	instruments().queueLength.Add(ctx, int64(delta))
}

// RecordLimit records a concurrency limit's current value on
// deadlinekit.shortcircuit.limit.
func RecordLimit(ctx context.Context, n int) {
	instruments().limit.Record(ctx, int64(n))
}

// RecordAdmission records the concurrency limit's decision on the server span in ctx
// (decision, whether the request was queued, the wait), a queued request's wait in
// the deadlinekit.shortcircuit.queue_wait histogram, and a refusal in
// deadlinekit.shortcircuit.rejections by reason.
func RecordAdmission(ctx context.Context, decision string, queued bool, wait time.Duration) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(
			AdmissionKey.String(decision),
			QueuedKey.Bool(queued),
			QueueWaitKey.Float64(millis(wait)),
		)
		if decision != "admitted" {
			span.SetStatus(codes.Error, "refused before the handler ran: "+decision)
		}
	}
	s := instruments()
	if queued {
		s.queueWait.Record(ctx, wait.Seconds())
	}
	if decision != "admitted" {
		s.rejections.Add(ctx, 1, reasonOption(decision)...)
	}
}

// reasonOptions are the rejections metric's attribute sets, made once (and passed as
// a ready slice) so that counting a refusal does not allocate.
var reasonOptions = func() map[string][]metric.AddOption {
	m := map[string][]metric.AddOption{}
	for _, r := range []string{"below_floor", "expired", "cannot_finish", "dropped", "overloaded", "canceled"} {
		m[r] = []metric.AddOption{metric.WithAttributes(ReasonKey.String(r))}
	}
	return m
}()

func reasonOption(r string) []metric.AddOption {
	if o, ok := reasonOptions[r]; ok {
		return o
	}
	return []metric.AddOption{metric.WithAttributes(ReasonKey.String(r))}
}
