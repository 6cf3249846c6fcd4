package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/internal/metrictest"
	"github.com/deadlinekit/deadlinekit/internal/record"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/otelattr"
	"github.com/deadlinekit/deadlinekit/retry"
)

var runs atomic.Int32

type always503 struct{}

func (always503) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("down"))}, nil
}

// The breaker's telemetry through a recording SDK, as a user's exporter receives it:
// the call that opens the circuit carries the state-change event, the refused call
// carries the refusal on its call span (never on the handler's server span), and the
// metrics count the outcomes, the transition, the refusal and the state.
func TestTelemetryThroughTheSDK(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	reader := metrictest.Global()
	// A target of its own for each run: the metrics are the process's.
	host := fmt.Sprintf("down%d.test", runs.Add(1))
	target := "http://" + host + ":80"
	rt := deadlinekit.NewTransport(always503{},
		deadlinekit.WithBreaker(breaker.WithMinCalls(2), breaker.WithFailureRatio(0.5), breaker.WithOpenFor(time.Hour)),
		deadlinekit.WithRetry(retry.WithMaxAttempts(1)), deadlinekit.Without(deadlinekit.Hedge))
	sctx, server := tp.Tracer("test").Start(context.Background(), "GET /handle", trace.WithSpanKind(trace.SpanKindServer))
	for i := range 3 {
		ctx, cancel := context.WithTimeout(sctx, time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/x", nil)
		resp, err := rt.RoundTrip(req)
		if i < 2 {
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			resp.Body.Close()
		} else if !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("third call: %v; want refused by the open circuit", err)
		}
		cancel()
	}
	server.End()

	var calls []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch {
		case s.SpanKind() == trace.SpanKindServer:
			for _, kv := range s.Attributes() {
				if strings.HasPrefix(string(kv.Key), "deadlinekit.breaker.") {
					t.Errorf("the server span carries %s", kv.Key)
				}
			}
		case s.Name() == "GET":
			calls = append(calls, s)
		}
	}
	if len(calls) != 3 {
		t.Fatalf("%d call spans; want 3", len(calls))
	}
	var opened bool
	for _, ev := range calls[1].Events() {
		opened = opened || ev.Name == otelattr.BreakerStateChangeEvent && hasAttr(ev.Attributes, otelattr.BreakerStateKey.String("open"))
	}
	if !opened {
		t.Errorf("the call that opened the circuit has events %v; want the state change to open", calls[1].Events())
	}
	for _, want := range []attribute.KeyValue{otelattr.BreakerRefusedKey.Bool(true), otelattr.BreakerStateKey.String("open"), otelattr.BreakerTargetKey.String(target)} {
		if !hasAttr(calls[2].Attributes(), want) {
			t.Errorf("the refused call's span lacks %s=%s (has %v)", want.Key, want.Value.String(), calls[2].Attributes())
		}
	}

	on := otelattr.BreakerTargetKey.String(target)
	got := map[string]int64{
		"deadlinekit.breaker.outcomes/failure": int64(metrictest.Total(t, reader, "deadlinekit.breaker.outcomes", on, otelattr.BreakerOutcomeKey.String("failure"))),
		"deadlinekit.breaker.transitions/open": int64(metrictest.Total(t, reader, "deadlinekit.breaker.transitions", on, otelattr.BreakerStateKey.String("open"))),
		"deadlinekit.breaker.refused/":         int64(metrictest.Total(t, reader, "deadlinekit.breaker.refused", on)),
		"deadlinekit.breaker.state":            int64(metrictest.Total(t, reader, "deadlinekit.breaker.state", on)),
	}
	for name, want := range map[string]int64{
		"deadlinekit.breaker.outcomes/failure": 2,
		"deadlinekit.breaker.transitions/open": 1,
		"deadlinekit.breaker.refused/":         1,
		"deadlinekit.breaker.state":            2,
	} {
		if got[name] != want {
			t.Errorf("metric %s = %d; want %d (all: %v)", name, got[name], want, got)
		}
	}
}

func hasAttr(kvs []attribute.KeyValue, want attribute.KeyValue) bool {
	for _, kv := range kvs {
		if kv.Key == want.Key && kv.Value == want.Value {
			return true
		}
	}
	return false
}

type toggled struct{ up atomic.Bool }

func (b *toggled) RoundTrip(*http.Request) (*http.Response, error) {
	if b.up.Load() {
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody}, nil
	}
	return always503{}.RoundTrip(nil)
}

// A call whose first attempt an open circuit refused and whose retry went out as the
// probe: its call span says what happened last, a probe, not a refusal.
func TestCallSpanSaysTheLastAttempt(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	base := &toggled{}
	rt := deadlinekit.NewTransport(base,
		deadlinekit.WithBreaker(breaker.WithConsecutiveFailures(2), breaker.WithOpenFor(50*time.Millisecond), breaker.WithProbes(1)),
		deadlinekit.WithRetry(retry.WithMaxAttempts(2)), deadlinekit.Without(deadlinekit.Hedge))
	client := &http.Client{Transport: rt}
	for range 2 {
		if resp, err := client.Get("http://flaky.test/"); err == nil {
			resp.Body.Close()
		}
	}
	base.up.Store(true)
	// This call's first attempt finds the circuit open; the retry layer waits for the
	// probe (50 ms, well inside the second) and the probe succeeds.
	ctx, root := tp.Tracer("test").Start(context.Background(), "user request")
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://flaky.test/", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	root.End()
	var call sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Parent().SpanID() == root.SpanContext().SpanID() {
			call = s
		}
	}
	if call == nil {
		t.Fatal("no call span under the user's request")
	}
	got := testkit.Attrs(call)
	if !got[otelattr.BreakerProbeKey].AsBool() || got[otelattr.BreakerRefusedKey].AsBool() || got[otelattr.BreakerStateKey].AsString() != string(record.BreakerHalfOpen) {
		t.Errorf("call span: probe %v, refused %v, state %q; want a probe, not refused, half_open",
			got[otelattr.BreakerProbeKey], got[otelattr.BreakerRefusedKey], got[otelattr.BreakerStateKey].AsString())
	}
}
