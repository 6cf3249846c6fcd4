package record_test

import (
	"context"
	"fmt"
	"time"

	"github.com/deadlinekit/deadlinekit/internal/record"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A hedged call made by a handler: the primary is slow, the hedge answers, the
// primary is cancelled. The call has a span of its own, under the handler's server
// span, and the server span carries nothing of the call's. The SDK here stands in for
// the one a service installs at start-up.
func ExampleStartCall() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, server := tp.Tracer("example").Start(context.Background(), "GET /price", trace.WithSpanKind(trace.SpanKindServer))

	cctx, call := record.StartCall(ctx, record.HTTP, "GET")
	_, primary := record.StartAttempt(cctx, record.HTTP, record.KindPrimary, 1)
	hctx, hedge := record.StartAttempt(cctx, record.HTTP, record.KindHedge, 2)
	record.BudgetSent(hctx, 180*time.Millisecond)
	hedge.End(record.OutcomeSuccess, nil)
	primary.End(record.OutcomeCanceled, context.Canceled)
	record.HedgeCall(cctx, 1, true, "")
	call.End(nil)
	server.End()

	for _, s := range rec.Ended() {
		fmt.Println(s.Name())
		for _, kv := range s.Attributes() {
			fmt.Printf("  %s=%s\n", kv.Key, kv.Value.String())
		}
	}
	// Output:
	// attempt hedge
	//   deadlinekit.attempt.number=2
	//   deadlinekit.attempt.kind=hedge
	//   http.request.resend_count=1
	//   deadlinekit.budget.sent_ms=180
	//   deadlinekit.attempt.outcome=success
	// attempt primary
	//   deadlinekit.attempt.number=1
	//   deadlinekit.attempt.kind=primary
	//   http.request.resend_count=0
	//   deadlinekit.attempt.outcome=canceled
	// GET
	//   deadlinekit.attempts=2
	//   deadlinekit.hedge.count=1
	//   deadlinekit.hedge.won=true
	//   deadlinekit.budget.sent_ms=180
	// GET /price
}
