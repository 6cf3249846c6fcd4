package dedup_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/otelattr"
)

func TestOutcomeOnTheServerSpan(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(t.Context())
	h := dedup.NewMiddleware(dedup.NewMemoryStore())(&charges{})
	for _, tc := range []struct{ key, body string }{{"k", "1"}, {"k", "1"}, {"k", "2"}, {`"open`, "1"}} {
		req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(tc.body))
		req.Header.Set("Idempotency-Key", tc.key)
		ctx, span := tp.Tracer("test").Start(req.Context(), "server")
		h.ServeHTTP(httptest.NewRecorder(), req.WithContext(ctx))
		span.End()
	}
	spans := sr.Ended()
	want := []string{"first", "replayed", "mismatch", "malformed"}
	if len(spans) != len(want) {
		t.Fatalf("%d spans", len(spans))
	}
	for i, s := range spans {
		testkit.WantAttrs(t, s, otelattr.DedupOutcomeKey.String(want[i]))
	}
}
