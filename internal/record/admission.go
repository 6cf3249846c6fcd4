package record

import (
	"context"
	"time"

	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/otelattr"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// InFlight adds delta to deadlinekit.shortcircuit.in_flight, the handlers
// running under a concurrency limit.
func InFlight(ctx context.Context, delta int) {
	if delta != 0 {
		instruments().inFlight.Add(ctx, int64(delta))
	}
}

// QueueLength adds delta to deadlinekit.shortcircuit.queue_length.
func QueueLength(ctx context.Context, delta int) {
	instruments().queueLength.Add(ctx, int64(delta))
}

// Limit records a concurrency limit's current value on
// deadlinekit.shortcircuit.limit.
func Limit(ctx context.Context, n int) {
	instruments().limit.Record(ctx, int64(n))
}

// Admission records the concurrency limit's decision on the server span in ctx
// (decision, whether the request was queued; a queued request's wait, or for a
// refusal on arrival the predicted one; for a refusal for lack of time, the work it
// had to have time for and the time it had left, when it had a deadline), a queued
// request's wait in the deadlinekit.shortcircuit.queue_wait histogram, and a
// refusal in deadlinekit.shortcircuit.rejections by reason and by the request's
// level (package criticality). displacedBy is, for a request whose queue place a
// newcomer took, the newcomer's level ("" otherwise), on the span. A refusal makes
// the span an error, except "canceled" (the caller left while the request was
// queued).
func Admission(ctx context.Context, decision string, queued bool, wait, work, left time.Duration, has bool, displacedBy string) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(
			otelattr.ShortCircuitAdmissionKey.String(decision),
			otelattr.ShortCircuitQueuedKey.Bool(queued),
		)
		switch {
		case queued:
			span.SetAttributes(otelattr.ShortCircuitQueueWaitKey.Float64(millis(wait)))
		case decision != "admitted":
			span.SetAttributes(otelattr.ShortCircuitPredictedWaitKey.Float64(millis(wait)))
		}
		if decision == "cannot_finish" || decision == "dropped" {
			span.SetAttributes(otelattr.ShortCircuitWorkKey.Float64(millis(work)))
			if has {
				span.SetAttributes(otelattr.ShortCircuitRemainingKey.Float64(millis(left)))
			}
		}
		if displacedBy != "" {
			span.SetAttributes(otelattr.ShortCircuitDisplacedByKey.String(displacedBy))
		}
		// A refusal is an error; a caller that left while queued is not: nothing
		// failed, nobody is waiting for the answer.
		if decision != "admitted" && decision != "canceled" {
			span.SetStatus(codes.Error, "refused before the handler ran: "+decision)
		}
	}
	s := instruments()
	if queued {
		s.queueWait.Record(ctx, wait.Seconds())
	}
	if decision != "admitted" {
		s.rejections.Add(ctx, 1, reasonOption(decision, criticality.From(ctx))...)
	}
}

// reasonOptions are the rejections metric's attribute sets, by reason and level,
// made once (and passed as a ready slice) so that counting a refusal does not
// allocate.
var reasonOptions = func() map[string]*[levels][]metric.AddOption {
	m := map[string]*[levels][]metric.AddOption{}
	for _, r := range []string{"below_floor", "expired", "cannot_finish", "dropped", "overloaded", "canceled"} {
		var byLevel [levels][]metric.AddOption
		for i := range byLevel {
			byLevel[i] = reasonAttrs(r, criticality.Sheddable+criticality.Level(i))
		}
		m[r] = &byLevel
	}
	return m
}()

// levels is the number of levels: from criticality.Sheddable to CriticalPlus.
const levels = int(criticality.CriticalPlus-criticality.Sheddable) + 1

func reasonOption(r string, l criticality.Level) []metric.AddOption {
	if o, ok := reasonOptions[r]; ok && l.Valid() {
		return o[l-criticality.Sheddable]
	}
	return reasonAttrs(r, l)
}

func reasonAttrs(r string, l criticality.Level) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributes(otelattr.ShortCircuitReasonKey.String(r), otelattr.CriticalityKey.String(l.String()))}
}
