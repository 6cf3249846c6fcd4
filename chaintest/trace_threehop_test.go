package chaintest_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/otelattr"
)

// slowB is hop B: it calls C, asking it to stall when A asked B to.
type slowB struct {
	testgrpc.UnimplementedTestServiceServer
	c    *http.Client
	cURL string
}

func (b *slowB) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	url := b.cURL
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("x-stall")) > 0 {
		url += "/stall"
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := b.c.Do(req)
	if err = deadlinekit.FromHTTP(resp, err); err != nil {
		return nil, deadlinekit.GRPCError(ctx, err)
	}
	return &testgrpc.SimpleResponse{}, nil
}

// What Jaeger shows of a hedge in a chain: client → A (HTTP) → B (gRPC) → C (HTTP),
// the root constructors on every hop, otelhttp and otelgrpc around them. The client
// hedges its call to A: the primary stalls all the way down to C, the hedge answers,
// so the primary's whole subtree is cancelled. On the hedge's path C fails once
// (503) and B's call to C is retried. The spans with status Error are exactly the
// failed attempt and C's server span of that 503 and, of the user's instrumentation,
// the client spans that OTel's client conventions make errors of a cancel
// (otelgrpc's per-attempt span, otelhttp's call span); no span of the toolkit's, and
// no server span, of a cancelled request is one.
func TestTraceThreeHopsHedgeLoserIsNoError(t *testing.T) {
	tp, rec := traced(t)
	withTP := otelhttp.WithTracerProvider(tp)
	var cCalls atomic.Int32
	c := httptest.NewServer(otelhttp.NewHandler(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/stall") {
			select {
			case <-r.Context().Done():
				deadlinekit.WriteHTTPError(w, r.Context().Err())
			case <-time.After(5 * time.Second):
			}
			return
		}
		if cCalls.Add(1) == 1 {
			http.Error(w, "warming up", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "c")
	})), "C", withTP))
	defer c.Close()
	bToC := &http.Client{Transport: otelhttp.NewTransport(deadlinekit.NewTransport(nil), withTP)}
	defer bToC.CloseIdleConnections()

	gs := grpc.NewServer(append(deadlinekit.ServerOptions(), grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp))))...)
	testgrpc.RegisterTestServiceServer(gs, &slowB{c: bToC, cURL: c.URL})
	conn := dial(t, serveGRPC(t, gs), append(deadlinekit.DialOptions(),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp))))...)
	toB := testgrpc.NewTestServiceClient(conn)

	a := httptest.NewServer(otelhttp.NewHandler(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if !isHedge(r) {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-stall", "1")
		}
		if _, err := toB.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
			deadlinekit.WriteHTTPError(w, deadlinekit.FromGRPC(err, nil))
			return
		}
		io.WriteString(w, "a")
	})), "A", withTP))
	defer a.Close()
	toA := &http.Client{Transport: otelhttp.NewTransport(deadlinekit.NewTransport(nil, hedgeFast), withTP)}
	defer toA.CloseIdleConnections()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx, root := tp.Tracer("test").Start(ctx, "client")
	if code, err := get(ctx, toA, a.URL); err != nil || code != http.StatusOK {
		t.Fatalf("chain answered %d, %v; want 200", code, err)
	}
	root.End()
	// Every server span ends before the spans are read: A's primary, its hedge; B's
	// two; C's stalled one, its 503 and its answer.
	waitFor(func() bool { return servers(rec.Ended()) >= 7 })
	a.Close()
	gs.GracefulStop()
	c.Close()

	spans := rec.Ended()
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	// The cancelled subtree: everything under the client's attempt that ended
	// canceled (the attempts beneath it, whose callers left, end canceled too).
	var loser sdktrace.ReadOnlySpan
	for _, s := range spans {
		call := byID[s.Parent().SpanID()]
		if v := testkit.Attrs(s)[otelattr.AttemptOutcomeKey]; v.AsString() == "canceled" && call != nil &&
			call.Parent().SpanID() == root.SpanContext().SpanID() {
			if loser != nil {
				t.Fatalf("two cancelled attempts of the client's call: %q and %q", loser.Name(), s.Name())
			}
			loser = s
		}
	}
	if loser == nil {
		t.Fatal("no attempt ended canceled: the hedge did not win")
	}
	under := func(s sdktrace.ReadOnlySpan) bool {
		for p, ok := s, true; ok; p, ok = byID[p.Parent().SpanID()] {
			if p.SpanContext().SpanID() == loser.SpanContext().SpanID() {
				return true
			}
		}
		return false
	}
	var failed, failedServers, cancelledServers int
	for _, s := range spans {
		attrs := testkit.Attrs(s)
		outcome := attrs[otelattr.AttemptOutcomeKey].AsString()
		toolkit := s.InstrumentationScope().Name == otelattr.ScopeName
		isErr := s.Status().Code == codes.Error
		if outcome == "failure" {
			failed++
			if !isErr {
				t.Errorf("failed attempt %q is not an error", s.Name())
			}
			if !strings.Contains(s.Status().Description, "503") {
				t.Errorf("failed attempt %q: status %q; want C's 503", s.Name(), s.Status().Description)
			}
		}
		switch {
		case !isErr, outcome == "failure":
		case !under(s) && s.SpanKind() == trace.SpanKindServer && attrs["http.response.status_code"].AsInt64() == http.StatusServiceUnavailable:
			failedServers++ // C's 503: a failed call, seen from the server
		case !under(s):
			t.Errorf("span %q (%s) is an error outside the cancelled subtree: %v", s.Name(), s.SpanKind(), s.Status())
		case toolkit || s.SpanKind() == trace.SpanKindServer:
			t.Errorf("span %q (%s) of a cancelled request is an error: %v", s.Name(), s.SpanKind(), s.Status())
		default:
			// otelhttp's and otelgrpc's client spans follow OTel's client conventions,
			// which make any transport failure, a cancel included, an error.
			t.Logf("the user's instrumentation marks a cancelled call an error: %q (%s, %s): %v",
				s.Name(), s.SpanKind(), s.InstrumentationScope().Name, s.Status())
		}
		if s.SpanKind() == trace.SpanKindServer && under(s) {
			cancelledServers++
		}
	}
	if failed != 1 {
		t.Errorf("%d failed attempts; want 1, B's call to C answered 503", failed)
	}
	if failedServers != 1 {
		t.Errorf("%d failed server spans; want 1, C's 503", failedServers)
	}
	if cancelledServers != 3 {
		t.Errorf("%d server spans in the cancelled subtree; want A's, B's and C's", cancelledServers)
	}
}
