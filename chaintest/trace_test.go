package chaintest_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	experimental "google.golang.org/grpc/experimental/opentelemetry"
	grpcotel "google.golang.org/grpc/stats/opentelemetry"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/internal/vocab"
	"github.com/deadlinekit/deadlinekit/otelattr"
)

// clientKeys are the attributes of a call (the vocabulary's table says which);
// no server span may carry one.
var clientKeys = func() []attribute.Key {
	var out []attribute.Key
	for _, a := range vocab.Attributes {
		if a.Client() {
			out = append(out, a.Key)
		}
	}
	return out
}()

// front starts an HTTP service under otelhttp whose handler calls twice through
// call, and sends it one request; it returns once the handler has answered.
func front(t *testing.T, tp trace.TracerProvider, call func(ctx context.Context, i int) error) {
	t.Helper()
	srv := httptest.NewServer(otelhttp.NewHandler(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 2 {
			if err := call(r.Context(), i); err != nil {
				t.Errorf("call %d: %v", i, err)
			}
		}
	})), "front", otelhttp.WithTracerProvider(tp)))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

type spanTree struct {
	t     *testing.T
	spans []sdktrace.ReadOnlySpan
	byID  map[trace.SpanID]sdktrace.ReadOnlySpan
}

// newTree collects the ended spans, once the three server spans (the front's and the
// two downstream calls') have ended: a downstream's server span may end after its
// answer reached the caller (grpc-go ends it from the server's stats handler).
func newTree(t *testing.T, rec *tracetest.SpanRecorder) *spanTree {
	var spans []sdktrace.ReadOnlySpan
	waitFor(func() bool { spans = rec.Ended(); return servers(spans) >= 3 })
	st := &spanTree{t: t, spans: spans, byID: map[trace.SpanID]sdktrace.ReadOnlySpan{}}
	for _, s := range st.spans {
		st.byID[s.SpanContext().SpanID()] = s
	}
	return st
}

// ancestor reports whether a is an ancestor of s.
func (st *spanTree) ancestor(a, s sdktrace.ReadOnlySpan) bool {
	for p, ok := st.byID[s.Parent().SpanID()]; ok; p, ok = st.byID[p.Parent().SpanID()] {
		if p.SpanContext().SpanID() == a.SpanContext().SpanID() {
			return true
		}
	}
	return false
}

// check applies part 2's rules: two call spans with their own totals, attempts their
// children ending before them, downstream server spans under an attempt, no server
// span with a call's keys, and an unhedged call saying why.
func (st *spanTree) check() {
	t := st.t
	var calls, attempts, down []sdktrace.ReadOnlySpan
	for _, s := range st.spans {
		if _, ok := value(s, otelattr.AttemptsKey); ok {
			calls = append(calls, s)
		}
		if strings.HasPrefix(s.Name(), "attempt ") {
			attempts = append(attempts, s)
		}
		if s.SpanKind() == trace.SpanKindServer {
			for _, k := range clientKeys {
				if _, ok := value(s, k); ok {
					t.Errorf("server span %q carries the client key %s", s.Name(), k)
				}
			}
			if s.Parent().IsValid() { // the downstream's: the front's span has no parent
				down = append(down, s)
			}
		}
	}
	var names []string
	for _, s := range st.spans {
		names = append(names, s.Name()+"/"+s.SpanKind().String())
	}
	if len(calls) != 2 {
		t.Fatalf("%d spans carry a call's totals; want one per call, 2 (spans: %v)", len(calls), names)
	}
	if calls[0].SpanContext().SpanID() == calls[1].SpanContext().SpanID() {
		t.Error("the two calls share a span")
	}
	for _, c := range calls {
		if c.SpanKind() != trace.SpanKindClient {
			t.Errorf("call span %q is of kind %v; want client", c.Name(), c.SpanKind())
		}
		if v, _ := value(c, otelattr.AttemptsKey); v.AsInt64() != 1 {
			t.Errorf("call span %q: attempts %v; want 1", c.Name(), v.AsInt64())
		}
		if v, ok := value(c, otelattr.HedgeSkipKey); !ok || v.AsString() != "warming_up" {
			t.Errorf("call span %q: hedge.skip %q; want %q", c.Name(), v.AsString(), "warming_up")
		}
	}
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans; want 2 (spans: %v)", len(attempts), names)
	}
	for _, a := range attempts {
		p, ok := st.byID[a.Parent().SpanID()]
		if !ok || (p.SpanContext().SpanID() != calls[0].SpanContext().SpanID() && p.SpanContext().SpanID() != calls[1].SpanContext().SpanID()) {
			t.Errorf("attempt span is not a child of a call span")
			continue
		}
		if a.EndTime().After(p.EndTime()) {
			t.Errorf("attempt span ends %v after its call span", a.EndTime().Sub(p.EndTime()))
		}
	}
	if len(down) != 2 {
		t.Fatalf("%d downstream server spans; want 2 (spans: %v)", len(down), names)
	}
	for _, d := range down {
		under := false
		for _, a := range attempts {
			under = under || st.ancestor(a, d)
		}
		if !under {
			t.Errorf("the downstream's server span %q does not hang under an attempt", d.Name())
		}
	}
}

// downstreamHTTP is an HTTP service with the stack and otelhttp.
func downstreamHTTP(t *testing.T, tp trace.TracerProvider) string {
	srv := httptest.NewServer(otelhttp.NewHandler(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})), "down", otelhttp.WithTracerProvider(tp)))
	t.Cleanup(srv.Close)
	return srv.URL
}

// otelhttp's transport outermost: its client span is the call's span.
func TestSpansOtelhttpTransport(t *testing.T) {
	tp, rec := traced(t)
	url := downstreamHTTP(t, tp)
	c := &http.Client{Transport: otelhttp.NewTransport(deadlinekit.NewTransport(nil), otelhttp.WithTracerProvider(tp))}
	defer c.CloseIdleConnections()
	front(t, tp, func(ctx context.Context, i int) error { _, err := get(ctx, c, url); return err })
	newTree(t, rec).check()
}

// No instrumentation of the client: the toolkit starts the call's span.
func TestSpansNoClientInstrumentation(t *testing.T) {
	tp, rec := traced(t)
	url := downstreamHTTP(t, tp)
	c := stackClient(t)
	front(t, tp, func(ctx context.Context, i int) error { _, err := get(ctx, c, url); return err })
	st := newTree(t, rec)
	st.check()
}

// downstreamGRPC is a gRPC service with the stack and the given server options.
func downstreamGRPC(t *testing.T, opts ...grpc.ServerOption) string {
	return serveHop(t, func(context.Context) error { return nil }, append(deadlinekit.ServerOptions(), opts...)...)
}

// otelgrpc's stats handler: it starts a span per attempt, below the interceptors, so
// the toolkit starts the call's span; otelgrpc's spans hang under the attempts.
func TestSpansOtelgrpcStatsHandler(t *testing.T) {
	tp, rec := traced(t)
	target := downstreamGRPC(t, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp))))
	conn := dial(t, target, append(deadlinekit.DialOptions(deadlinekit.WithIdempotentMethods(hopMethod)), grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp))))...)
	front(t, tp, func(ctx context.Context, i int) error { return invoke(ctx, conn) })
	newTree(t, rec).check()
}

// grpc-go's own OpenTelemetry plugin (gRFC A72), before the stack's options: its
// call span is the call's span.
func TestSpansGRPCOpenTelemetryPlugin(t *testing.T) {
	tp, rec := traced(t)
	o := grpcotel.Options{TraceOptions: experimental.TraceOptions{TracerProvider: tp, TextMapPropagator: propagation.TraceContext{}}}
	target := downstreamGRPC(t, grpcotel.ServerOption(o))
	conn := dial(t, target, append([]grpc.DialOption{grpcotel.DialOption(o)}, deadlinekit.DialOptions(deadlinekit.WithIdempotentMethods(hopMethod))...)...)
	front(t, tp, func(ctx context.Context, i int) error { return invoke(ctx, conn) })
	st := newTree(t, rec)
	st.check()
	for _, s := range st.spans {
		if _, ok := value(s, otelattr.AttemptsKey); ok && !strings.HasPrefix(s.Name(), "Sent.") {
			t.Errorf("the call's totals are on %q, not on the plugin's call span", s.Name())
		}
	}
}

// Whatever layers are left out, the downstream's server span is in the caller's trace:
// the layer that starts the call's span, or an attempt's, writes the trace context.
func TestSpansJoinTheTraceWithoutSomeLayers(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []deadlinekit.Option
	}{
		{"all layers", nil},
		{"without retry", []deadlinekit.Option{deadlinekit.Without(deadlinekit.Retry)}},
		{"without retry and hedge", []deadlinekit.Option{deadlinekit.Without(deadlinekit.Retry, deadlinekit.Hedge)}},
		{"without hedge", []deadlinekit.Option{deadlinekit.Without(deadlinekit.Hedge)}},
		{"propagate alone", []deadlinekit.Option{deadlinekit.Without(deadlinekit.Retry, deadlinekit.Hedge, deadlinekit.Breaker)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, rec := traced(t)
			url := downstreamHTTP(t, tp)
			c := stackClient(t, tc.opts...)
			ctx, root := tp.Tracer("test").Start(context.Background(), "user request")
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if _, err := get(ctx, c, url); err != nil {
				t.Fatal(err)
			}
			root.End()
			var servers, joined int
			waitFor(func() bool {
				servers, joined = 0, 0
				for _, s := range rec.Ended() {
					if s.SpanKind() == trace.SpanKindServer {
						servers++
						if s.SpanContext().TraceID() == root.SpanContext().TraceID() {
							joined++
						}
					}
				}
				return servers > 0
			})
			if servers != 1 || joined != 1 {
				t.Errorf("%d server spans, %d of them in the caller's trace; want 1 and 1", servers, joined)
			}
		})
	}
}
