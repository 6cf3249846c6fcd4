package record

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/deadlinekit/deadlinekit/otelattr"
)

// DedupWaited adds otelattr.DedupWaitedEvent to the server span in ctx: a repeat
// waited d for the first request with its key.
func DedupWaited(ctx context.Context, d time.Duration) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(otelattr.DedupWaitedEvent, trace.WithAttributes(otelattr.DedupWaitKey.Float64(millis(d))))
	}
}

// DedupHolderLeft sets otelattr.DedupHolderLeftKey on the server span in ctx: the
// repeat was refused with left until the first request's lease ends.
func DedupHolderLeft(ctx context.Context, left time.Duration) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(otelattr.DedupHolderLeftKey.Float64(millis(left)))
	}
}
