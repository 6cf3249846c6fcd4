package chaintest_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/otelattr"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// What the trace says of hedges and cancels: an attempt that lost to another ends
// canceled, an attempt whose caller gave up ends canceled, neither is an error; every
// failed attempt is, whichever layer sent it.

// hedgeFast is the root stack hedging after 10 ms, with no warm-up.
var hedgeFast = deadlinekit.WithHedge(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}))

// isHedge reports whether r is a hedge (a copy after the first).
func isHedge(r *http.Request) bool { return r.Header.Get("Grpc-Previous-Rpc-Attempts") != "" }

// attemptsOf returns the recorded attempt spans by kind.
func attemptsOf(rec *tracetest.SpanRecorder) map[string][]sdktrace.ReadOnlySpan {
	m := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if k, ok := testkit.Attrs(s)[otelattr.AttemptKindKey]; ok {
			m[k.AsString()] = append(m[k.AsString()], s)
		}
	}
	return m
}

// clients are the two setups of the README: the toolkit alone, and under otelhttp.
func clients(tp trace.TracerProvider, opts ...deadlinekit.Option) map[string]*http.Client {
	return map[string]*http.Client{
		"toolkit":  {Transport: deadlinekit.NewTransport(nil, opts...)},
		"otelhttp": {Transport: otelhttp.NewTransport(deadlinekit.NewTransport(nil, opts...), otelhttp.WithTracerProvider(tp))},
	}
}

// The hedge answers while the primary is still out: the primary's attempt span (the
// retry layer's, under which the hedging layer sent it) ends canceled, not an error.
func TestTraceHedgeWinCancelsThePrimary(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isHedge(r) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		io.WriteString(w, "hedge")
	}))
	defer srv.Close()
	tp, rec := traced(t)
	for name, c := range clients(tp, hedgeFast) {
		t.Run(name, func(t *testing.T) {
			rec.Reset()
			ctx, parent := tp.Tracer("test").Start(context.Background(), "caller")
			if code, err := get(ctx, c, srv.URL); err != nil || code != 200 {
				t.Fatalf("status %d, %v; want the hedge's 200", code, err)
			}
			parent.End()
			waitFor(func() bool { return len(rec.Ended()) >= 4 }) // a loser's span may end after the winner's answer reached the caller
			a := attemptsOf(rec)
			if len(a["primary"]) != 1 || len(a["hedge"]) != 1 {
				t.Fatalf("attempt spans %v; want one primary and one hedge", a)
			}
			p, h := a["primary"][0], a["hedge"][0]
			testkit.WantAttrs(t, p, otelattr.AttemptOutcomeKey.String("canceled"))
			testkit.WantAttrs(t, h, otelattr.AttemptOutcomeKey.String("success"))
			if p.Status().Code == codes.Error {
				t.Errorf("the cancelled primary is an error: %v", p.Status())
			}
		})
	}
}

// primary503 is the status a primary's 503 gives its attempt span (the retry layer's
// attempt), as TestTracePrimaryFailureIsAnError checks.
const primary503 = "HTTP 503 Service Unavailable"

// The primary fails with 503, its retry answers: the primary's attempt is a failure
// and an error.
func TestTracePrimaryFailureIsAnError(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "retry")
	}))
	defer srv.Close()
	tp, rec := traced(t)
	c := stackClient(t) // hedging warms up: no hedge
	ctx, parent := tp.Tracer("test").Start(context.Background(), "caller")
	if code, err := get(ctx, c, srv.URL); err != nil || code != 200 {
		t.Fatalf("status %d, %v; want the retry's 200", code, err)
	}
	parent.End()
	a := attemptsOf(rec)
	if len(a["primary"]) != 1 || len(a["retry"]) != 1 {
		t.Fatalf("attempt spans %v; want a primary and a retry", a)
	}
	p := a["primary"][0]
	testkit.WantAttrs(t, p, otelattr.AttemptOutcomeKey.String("failure"))
	if p.Status().Code != codes.Error || p.Status().Description != primary503 {
		t.Errorf("the primary's 503 has status %v; want Error, %q", p.Status(), primary503)
	}
}

// The hedge fails with 503 and the primary answers: the hedge's attempt is a failure
// and an error, as the primary's 503 is.
func TestTraceHedgeFailureIsAnError(t *testing.T) {
	tp, rec := traced(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isHedge(r) {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		// The primary answers once the hedge's attempt has ended with its 503, so
		// that the hedge is sent, and fails, however late a loaded machine runs it.
		waitFor(func() bool { return len(attemptsOf(rec)["hedge"]) > 0 })
		io.WriteString(w, "primary")
	}))
	defer srv.Close()
	for name, c := range clients(tp, hedgeFast) {
		t.Run(name, func(t *testing.T) {
			rec.Reset()
			ctx, parent := tp.Tracer("test").Start(context.Background(), "caller")
			if code, err := get(ctx, c, srv.URL); err != nil || code != 200 {
				t.Fatalf("status %d, %v; want the primary's 200", code, err)
			}
			parent.End()
			a := attemptsOf(rec)
			if len(a["primary"]) != 1 || len(a["hedge"]) != 1 {
				t.Fatalf("attempt spans %v; want one primary and one hedge", a)
			}
			p, h := a["primary"][0], a["hedge"][0]
			testkit.WantAttrs(t, h, otelattr.AttemptOutcomeKey.String("failure"))
			testkit.WantAttrs(t, p, otelattr.AttemptOutcomeKey.String("success"))
			if h.Status().Code != codes.Error || h.Status().Description != primary503 {
				t.Errorf("the hedge's 503 has status %v; want Error, %q as a primary's 503 has", h.Status(), primary503)
			}
			if p.Status().Code == codes.Error {
				t.Errorf("the primary's success is an error: %v", p.Status())
			}
		})
	}
}

// The caller gives up while its call is out: the attempt ends canceled and the
// toolkit's call span is no error (otelhttp's own span follows OTel's client
// conventions, which make any transport error one; it is the user's).
func TestTraceCallerCancelIsNotAFailure(t *testing.T) {
	arrived := make(chan struct{}, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer srv.Close()
	tp, rec := traced(t)
	for name, c := range clients(tp) {
		t.Run(name, func(t *testing.T) {
			rec.Reset()
			ctx, parent := tp.Tracer("test").Start(context.Background(), "caller")
			ctx, cancel := context.WithCancel(ctx)
			go func() { <-arrived; cancel() }()
			if _, err := get(ctx, c, srv.URL); err == nil {
				t.Fatal("a cancelled call succeeded")
			}
			parent.End()
			a := attemptsOf(rec)
			if len(a["primary"]) != 1 || len(a["retry"]) != 0 {
				t.Fatalf("attempt spans %v; want the primary only", a)
			}
			p := a["primary"][0]
			testkit.WantAttrs(t, p, otelattr.AttemptOutcomeKey.String("canceled"))
			if p.Status().Code == codes.Error {
				t.Errorf("the attempt its caller cancelled is an error: %v", p.Status())
			}
			for _, s := range rec.Ended() {
				if s.InstrumentationScope().Name == otelattr.ScopeName && s.Status().Code == codes.Error {
					t.Errorf("the toolkit's span %q is an error: %v", s.Name(), s.Status())
				}
			}
		})
	}
}

// A request whose caller left while it waited in the guard's queue (499) is no
// error on the server's span: the caller cancelled, nothing failed.
func TestTraceServerSpanOfALeftCallerIsNotAnError(t *testing.T) {
	tp, rec := traced(t)
	release, holding := make(chan struct{}), make(chan struct{}, 1)
	arrived := make(chan struct{}, 2)
	h := deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // the first to hold the slot says so
		case holding <- struct{}{}:
		default:
		}
		<-release
	}), deadlinekit.WithShortCircuit(shortcircuit.WithMaxConcurrency(1), shortcircuit.WithQueue(4, shortcircuit.FIFO)))
	// arrived: the request has reached the guard, which queues it (the slot is
	// taken) whether or not its caller has left by then.
	srv := httptest.NewServer(otelhttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		h.ServeHTTP(w, r)
	}), "server", otelhttp.WithTracerProvider(tp)))
	defer srv.Close()
	first := make(chan struct{})
	go func() { // holds the only slot
		defer close(first)
		if resp, err := http.Get(srv.URL); err == nil {
			resp.Body.Close()
		}
	}()
	// The second request is sent once the first holds the slot. (Sent when the
	// first had only reached otelhttp, it could take the slot itself on a busy
	// machine, and nothing was refused.)
	<-arrived
	<-holding
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-arrived; cancel() }()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	waitFor(func() bool { return len(rec.Ended()) >= 1 })
	close(release)
	<-first
	waitFor(func() bool { return len(rec.Ended()) >= 2 })
	var left int
	for _, s := range rec.Ended() {
		if s.SpanKind() != trace.SpanKindServer || testkit.Attrs(s)[otelattr.ShortCircuitAdmissionKey].AsString() != "canceled" {
			continue
		}
		left++
		if s.Status().Code == codes.Error {
			t.Errorf("the server span of a request whose caller left is an error: %v", s.Status())
		}
	}
	if left != 1 {
		t.Fatalf("%d server spans of a request refused as canceled; want 1", left)
	}
}
