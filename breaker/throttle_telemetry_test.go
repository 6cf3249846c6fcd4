package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/internal/metrictest"
	"github.com/deadlinekit/deadlinekit/otelattr"
	"github.com/deadlinekit/deadlinekit/retry"
)

// A throttled call's span says so, with the probability and the level, and the
// throttled metric counts it per target and level.
func TestThrottleTelemetry(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	reader := metrictest.Global()
	host := fmt.Sprintf("busy%d.test", runs.Add(1))
	target := "http://" + host + ":80"
	rt := deadlinekit.NewTransport(&refusing{refuse: true},
		deadlinekit.WithBreaker(countOnly), deadlinekit.WithRetry(retry.WithMaxAttempts(1)), deadlinekit.Without(deadlinekit.Hedge))
	ctx, parent := tp.Tracer("test").Start(criticality.With(context.Background(), criticality.Sheddable), "work")
	throttled := 0
	for range 40 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/x", nil)
		resp, err := rt.RoundTrip(req)
		if errors.Is(err, breaker.ErrThrottled) {
			throttled++
		} else if err != nil {
			t.Fatal(err)
		} else {
			resp.Body.Close()
		}
	}
	parent.End()
	var spans, marked int
	for _, s := range rec.Ended() {
		if s.Name() != "GET" {
			continue
		}
		spans++
		attrs := s.Attributes()
		if hasAttr(attrs, otelattr.BreakerThrottledKey.Bool(true)) {
			marked++
			if !hasAttr(attrs, otelattr.BreakerLevelKey.String("sheddable")) || !hasAttr(attrs, otelattr.BreakerTargetKey.String(target)) {
				t.Errorf("a throttled call's span: %v", attrs)
			}
			var p float64
			for _, kv := range attrs {
				if kv.Key == otelattr.BreakerThrottleProbabilityKey {
					p = kv.Value.AsFloat64()
				}
			}
			if p <= 0 || p >= 1 {
				t.Errorf("throttled with probability %v", p)
			}
		}
	}
	if throttled == 0 || marked != throttled || spans != 40 {
		t.Fatalf("%d throttled, %d spans marked, of %d spans", throttled, marked, spans)
	}
	got := metrictest.Total(t, reader, "deadlinekit.breaker.throttled", otelattr.BreakerTargetKey.String(target), otelattr.BreakerLevelKey.String("sheddable"))
	if int(got) != throttled {
		t.Fatalf("deadlinekit.breaker.throttled = %v, want %d", got, throttled)
	}
}
