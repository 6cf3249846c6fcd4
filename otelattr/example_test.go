package otelattr_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/otelattr"
)

// A test of a service's own reads what the toolkit recorded by key: here, the server
// spans of two requests, one that arrived with 250 ms (grpc-timeout: 250m) and one
// with 5 ms, below a static 20 ms floor. The SDK stands in for the one a service
// installs at start-up, and the spans for those otelhttp's handler would start.
func Example() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	h := deadlinekit.NewHandler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), deadlinekit.WithFloor(20*time.Millisecond))

	for _, timeout := range []string{"250m", "5m"} {
		ctx, span := tp.Tracer("example").Start(context.Background(), "GET /price", trace.WithSpanKind(trace.SpanKindServer))
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/price", nil)
		req.Header.Set("Grpc-Timeout", timeout)
		h.ServeHTTP(httptest.NewRecorder(), req)
		span.End()
	}

	for _, s := range rec.Ended() {
		attrs := attribute.NewSet(s.Attributes()...)
		received, _ := attrs.Value(otelattr.BudgetReceivedKey)
		rejected, _ := attrs.Value(otelattr.ShortCircuitRejectedKey)
		floor, _ := attrs.Value(otelattr.ShortCircuitFloorKey)
		fmt.Printf("received %s ms, rejected %t, floor %q\n", received.String(), rejected.AsBool(), floor.String())
	}
	// Output:
	// received 250 ms, rejected false, floor ""
	// received 5 ms, rejected true, floor "20"
}
