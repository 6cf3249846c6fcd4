package hedge_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/deadlinekit/deadlinekit/hedge"
)

// A recording span made with the OTel API only (no SDK): it keeps its name, its
// attributes and whether it ended; its tracer makes more of them.
type fakeSpan struct {
	noop.Span
	tp    *fakeProvider
	name  string
	mu    sync.Mutex
	attrs map[attribute.Key]attribute.Value
	ended bool
	ends  int       // times End was called
	endAt time.Time // when End was first called
}

func (s *fakeSpan) IsRecording() bool { return true }
func (s *fakeSpan) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range kv {
		s.attrs[a.Key] = a.Value
	}
}
func (s *fakeSpan) End(...trace.SpanEndOption) {
	s.mu.Lock()
	if s.ends == 0 {
		s.endAt = time.Now()
	}
	s.ended = true
	s.ends++
	s.mu.Unlock()
	if s.tp.onEnd != nil {
		s.tp.onEnd(s)
	}
}
func (s *fakeSpan) TracerProvider() trace.TracerProvider { return s.tp }
func (s *fakeSpan) attr(k string) attribute.Value {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attrs[attribute.Key(k)]
}

type fakeProvider struct {
	embedded.TracerProvider
	mu    sync.Mutex
	spans []*fakeSpan
	onEnd func(*fakeSpan) // called by every End, when set
}

// named returns the spans called name, in the order they were started.
func (p *fakeProvider) named(name string) []*fakeSpan {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*fakeSpan
	for _, s := range p.spans {
		if s.name == name {
			out = append(out, s)
		}
	}
	return out
}

// endState reports how often s was ended and when first.
func (s *fakeSpan) endState() (int, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ends, s.endAt
}

func (p *fakeProvider) Tracer(string, ...trace.TracerOption) trace.Tracer { return fakeTracer{p: p} }

func (p *fakeProvider) newSpan(name string, kv ...attribute.KeyValue) *fakeSpan {
	s := &fakeSpan{tp: p, name: name, attrs: map[attribute.Key]attribute.Value{}}
	s.SetAttributes(kv...)
	p.mu.Lock()
	p.spans = append(p.spans, s)
	p.mu.Unlock()
	return s
}

type fakeTracer struct {
	embedded.Tracer
	p *fakeProvider
}

func (t fakeTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	s := t.p.newSpan(name, cfg.Attributes()...)
	return trace.ContextWithSpan(ctx, s), s
}

// TestAttemptSpans: under a recording span, the layer starts the call's span (the
// caller's span is not a client span made for the call), each attempt gets a span of
// its own under it with its number, kind and outcome, and the call span gets the
// counts.
func TestAttemptSpans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp := &fakeProvider{}
		ctx := trace.ContextWithSpan(t.Context(), tp.newSpan("caller"))
		b := &latencyBackend{latency: func(a, _ int) time.Duration { return time.Second / time.Duration(1+999*a) }}
		rt := hedge.NewTransport(b, hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}))
		if got := get(ctx, rt); got != "attempt 1" {
			t.Fatalf("answer %q", got)
		}
		synctest.Wait()
		calls := tp.named("GET")
		if len(calls) != 1 {
			t.Fatalf("%d call spans, want 1", len(calls))
		}
		callSpan := calls[0]
		if callSpan.attr("deadlinekit.attempts").AsInt64() != 2 || callSpan.attr("deadlinekit.hedge.count").AsInt64() != 1 || !callSpan.attr("deadlinekit.hedge.won").AsBool() {
			t.Errorf("call span attributes %v", callSpan.attrs)
		}
		want := map[string]struct {
			number  int64
			outcome string
		}{"attempt primary": {1, "canceled"}, "attempt hedge": {2, "success"}}
		if len(tp.spans) != 4 {
			t.Fatalf("%d spans, want the caller's, the call's and two attempts'", len(tp.spans))
		}
		for _, s := range tp.spans[2:] {
			w, ok := want[s.name]
			if !ok || s.attr("deadlinekit.attempt.number").AsInt64() != w.number ||
				s.attr("deadlinekit.attempt.outcome").AsString() != w.outcome ||
				s.attr("http.request.resend_count").AsInt64() != w.number-1 || !s.ended {
				t.Errorf("span %q: %v, ended %v", s.name, s.attrs, s.ended)
			}
		}
	})
}

var _ http.RoundTripper = (*latencyBackend)(nil)

// TestObserverPanicEndsCallSpan: when an observer panics on a traced HTTP call, the
// call's span, which the layer started, still ends: it is not left open for ever.
func TestObserverPanicEndsCallSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp := &fakeProvider{}
		ctx := trace.ContextWithSpan(t.Context(), tp.newSpan("caller"))
		b := &latencyBackend{latency: func(int, int) time.Duration { return time.Millisecond }}
		rt := hedge.NewTransport(b, hedge.WithObserver(func(context.Context, hedge.Event) { panic("observer") }))
		func() {
			defer func() { _ = recover() }()
			get(ctx, rt)
		}()
		synctest.Wait()
		calls := tp.named("GET")
		if len(calls) != 1 {
			t.Fatalf("%d call spans, want 1", len(calls))
		}
		if n, _ := calls[0].endState(); n != 1 {
			t.Fatalf("the call span was ended %d times; want once", n)
		}
	})
}

// TestObserverPanicEndsGRPCCallSpan: the same on a gRPC call, whose span the
// interceptor started: it ends once, though the observer's panic goes through.
func TestObserverPanicEndsGRPCCallSpan(t *testing.T) {
	tp := &fakeProvider{}
	ctx := trace.ContextWithSpan(t.Context(), tp.newSpan("caller"))
	icpt := hedge.New(hedge.WithObserver(func(context.Context, hedge.Event) { panic("observer") })).UnaryClientInterceptor()
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	func() {
		defer func() {
			if r := recover(); r != "observer" {
				t.Errorf("recovered %v; want the observer's panic", r)
			}
		}()
		_ = icpt(ctx, "/svc/Get", &emptypb.Empty{}, &emptypb.Empty{}, nil, invoker)
	}()
	calls := tp.named("Sent.svc.Get")
	if len(calls) != 1 {
		t.Fatalf("%d call spans, want 1", len(calls))
	}
	if n, _ := calls[0].endState(); n != 1 {
		t.Fatalf("the call span was ended %d times; want once", n)
	}
}
