package deadlinekit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/otelattr"
	"github.com/deadlinekit/deadlinekit/propagate"
)

// levelChain is end user → A (HTTP, an edge that sets the level by route) → B
// (gRPC) → C (connect), three loopback servers built with the root constructors
// and connectkit. Each hop notes, for every run of its handler, the level on its
// context and the level header its request carried ("-": none).
type levelChain struct {
	url   string
	mu    sync.Mutex
	seen  map[string][]string // hop → "level/header" per run
	bRuns atomic.Int64        // B's unary runs, for the hedge: the first waits
	cRuns atomic.Int64        // C's unary runs, for the retry: the first fails
}

const (
	cUnary  = "/crittest.C/Unary"
	cWatch  = "/crittest.C/Watch"
	bUnary  = "/grpc.testing.TestService/UnaryCall"
	noLevel = "-"
)

func (ch *levelChain) saw(hop string, ctx context.Context, header []string) {
	h := noLevel
	if len(header) > 0 {
		h = fmt.Sprint(header)
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.seen[hop] = append(ch.seen[hop], criticality.From(ctx).String()+"/"+h)
}

func (ch *levelChain) take() map[string][]string {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	s := ch.seen
	ch.seen = map[string][]string{}
	ch.bRuns.Store(0)
	ch.cRuns.Store(0)
	return s
}

// levelB is hop B: its unary call calls C's unary procedure, its stream C's
// stream, each with the mode A sent (the payload's body).
type levelB struct {
	testgrpc.UnimplementedTestServiceServer
	ch    *levelChain
	unary *connect.Client[wrapperspb.StringValue, wrapperspb.StringValue]
	watch *connect.Client[wrapperspb.StringValue, wrapperspb.StringValue]
}

func (b *levelB) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	b.ch.saw("B", ctx, metadata.ValueFromIncomingContext(ctx, criticality.MetadataKey))
	mode := string(req.GetPayload().GetBody())
	if mode == "hedge" && b.ch.bRuns.Add(1) == 1 {
		<-ctx.Done() // the primary waits: the hedge answers, and this copy is cancelled
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if _, err := b.unary.CallUnary(ctx, connect.NewRequest(wrapperspb.String(mode))); err != nil {
		return nil, deadlinekit.GRPCError(ctx, err)
	}
	return &testgrpc.SimpleResponse{}, nil
}

func (b *levelB) StreamingOutputCall(req *testgrpc.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error {
	ctx := stream.Context()
	b.ch.saw("B", ctx, metadata.ValueFromIncomingContext(ctx, criticality.MetadataKey))
	s, err := b.watch.CallServerStream(ctx, connect.NewRequest(wrapperspb.String("stream")))
	if err != nil {
		return err
	}
	defer s.Close()
	for s.Receive() {
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	return s.Err()
}

// routeLevel is the edge's WithCriticality: by route, and a browser's prefetch.
func routeLevel(r *http.Request) criticality.Level {
	switch {
	case r.URL.Path == "/checkout":
		return criticality.CriticalPlus
	case r.URL.Path == "/prefetch", r.Header.Get("Sec-Purpose") == "prefetch":
		return criticality.Sheddable
	}
	return criticality.Critical
}

func startLevelChain(t *testing.T) *levelChain {
	t.Helper()
	ch := &levelChain{seen: map[string][]string{}}

	// C: connect, a unary procedure whose first run fails in mode "fail", and a
	// stream.
	mux := http.NewServeMux()
	mux.Handle(cUnary, connect.NewUnaryHandler(cUnary,
		func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			ch.saw("C", ctx, req.Header().Values(criticality.Header))
			if req.Msg.GetValue() == "fail" && ch.cRuns.Add(1) == 1 {
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("first run fails"))
			}
			return connect.NewResponse(wrapperspb.String("ok")), nil
		}, connectkit.HandlerOption()))
	mux.Handle(cWatch, connect.NewServerStreamHandler(cWatch,
		func(ctx context.Context, req *connect.Request[wrapperspb.StringValue], s *connect.ServerStream[wrapperspb.StringValue]) error {
			ch.saw("C", ctx, req.Header().Values(criticality.Header))
			return s.Send(wrapperspb.String("event"))
		}, connectkit.HandlerOption()))
	c := httptest.NewServer(mux)
	t.Cleanup(c.Close)
	toC := connectkit.ClientOption(deadlinekit.WithIdempotentMethods(cUnary))

	// B: gRPC.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(deadlinekit.ServerOptions()...)
	testgrpc.RegisterTestServiceServer(gs, &levelB{
		ch:    ch,
		unary: connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](c.Client(), c.URL+cUnary, toC),
		watch: connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](c.Client(), c.URL+cWatch, toC),
	})
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	dial := func(opts ...deadlinekit.Option) testgrpc.TestServiceClient {
		conn, err := grpc.NewClient(lis.Addr().String(), append(deadlinekit.DialOptions(opts...),
			grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return testgrpc.NewTestServiceClient(conn)
	}
	plain := dial(deadlinekit.Without(deadlinekit.Hedge))
	// Hedging A → B: a hedge 1 ms after the primary, whatever the latencies.
	hedged := dial(deadlinekit.WithIdempotentMethods(bUnary), deadlinekit.WithHedge(
		hedge.WithDelay(hedge.Delay{Initial: time.Millisecond, MinSamples: 1 << 20}), hedge.WithMaxExtraLoad(1)))

	// A: the HTTP edge.
	a := httptest.NewServer(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		ch.saw("A", ctx, r.Header.Values(criticality.Header))
		mode := r.URL.Query().Get("mode")
		var err error
		switch mode {
		case "stream":
			var s grpc.ServerStreamingClient[testgrpc.StreamingOutputCallResponse]
			if s, err = plain.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{}); err == nil {
				for err == nil {
					_, err = s.Recv()
				}
				if errors.Is(err, io.EOF) {
					err = nil
				}
			}
		case "hedge":
			_, err = hedged.UnaryCall(ctx, &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte(mode)}})
		default:
			_, err = plain.UnaryCall(ctx, &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte(mode)}})
		}
		if err != nil {
			deadlinekit.WriteHTTPError(w, deadlinekit.FromGRPC(err, nil))
			return
		}
		io.WriteString(w, "ok")
	}), deadlinekit.WithEdge(), deadlinekit.WithCriticality(routeLevel)))
	t.Cleanup(a.Close)
	ch.url = a.URL
	return ch
}

// get sends what an end user sends: a GET to A, with the level header it claims
// ("" none) and more headers (name, value...).
func (ch *levelChain) get(t *testing.T, path, claim string, hdr ...string) map[string][]string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, ch.url+path, nil)
	if claim != "" {
		req.Header.Set(criticality.Header, claim)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	if v := resp.Header.Values(criticality.Header); len(v) > 0 {
		t.Errorf("GET %s: the edge's answer carries %s: %q", path, criticality.Header, v)
	}
	return ch.take()
}

// The level the edge sets reaches the last hop's handler, over HTTP, gRPC and
// connect, on the wire at each hop after the edge (nothing for critical); what an
// end user claims is never read: it cannot promote itself, nor reach a hop.
func TestCriticalityChain(t *testing.T) {
	ch := startLevelChain(t)
	for _, tc := range []struct {
		name, path, claim string
		hdr               []string
		want              map[string][]string
	}{
		{name: "checkout: critical_plus", path: "/checkout", want: map[string][]string{
			"A": {"critical_plus/-"}, "B": {"critical_plus/[critical_plus]"}, "C": {"critical_plus/[critical_plus]"}}},
		{name: "prefetch, claiming critical_plus", path: "/prefetch", claim: "critical_plus", want: map[string][]string{
			"A": {"sheddable/-"}, "B": {"sheddable/[sheddable]"}, "C": {"sheddable/[sheddable]"}}},
		{name: "a browser's prefetch", path: "/page", hdr: []string{"Sec-Purpose", "prefetch"}, want: map[string][]string{
			"A": {"sheddable/-"}, "B": {"sheddable/[sheddable]"}, "C": {"sheddable/[sheddable]"}}},
		{name: "plain route, claiming critical_plus: critical, nothing on the wire", path: "/page", claim: "critical_plus", want: map[string][]string{
			"A": {"critical/-"}, "B": {"critical/-"}, "C": {"critical/-"}}},
		{name: "plain route, a malformed claim is not a 400 at the edge", path: "/page", claim: "urgent\t,x", want: map[string][]string{
			"A": {"critical/-"}, "B": {"critical/-"}, "C": {"critical/-"}}},
		{name: "retry B → C: both attempts carry it", path: "/prefetch?mode=fail", want: map[string][]string{
			"A": {"sheddable/-"}, "B": {"sheddable/[sheddable]"}, "C": {"sheddable/[sheddable]", "sheddable/[sheddable]"}}},
		{name: "hedge A → B: both copies carry it", path: "/checkout?mode=hedge", want: map[string][]string{
			"A": {"critical_plus/-"}, "B": {"critical_plus/[critical_plus]", "critical_plus/[critical_plus]"}, "C": {"critical_plus/[critical_plus]"}}},
		{name: "streams: gRPC A → B, connect B → C", path: "/prefetch?mode=stream", want: map[string][]string{
			"A": {"sheddable/-"}, "B": {"sheddable/[sheddable]"}, "C": {"sheddable/[sheddable]"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ch.get(t, tc.path, tc.claim, tc.hdr...)
			for _, hop := range []string{"A", "B", "C"} {
				if !slices.Equal(got[hop], tc.want[hop]) {
					t.Errorf("hop %s saw %q; want %q", hop, got[hop], tc.want[hop])
				}
			}
		})
	}
}

// levelGRPC is a gRPC service that notes the level of its calls and the level
// metadata they still carry.
type levelGRPC struct {
	testgrpc.UnimplementedTestServiceServer
	ch *levelChain
}

func (s *levelGRPC) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.ch.saw("unary", ctx, metadata.ValueFromIncomingContext(ctx, criticality.MetadataKey))
	return &testgrpc.SimpleResponse{}, nil
}

func (s *levelGRPC) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error {
	s.ch.saw("stream", stream.Context(), metadata.ValueFromIncomingContext(stream.Context(), criticality.MetadataKey))
	return nil
}

// WithCriticality's function sees a gRPC call as its HTTP request (the method as
// the path, the metadata as the header); a gRPC edge never reads the level its
// callers send, a gRPC server that is not an edge gives the function the level a
// trusted caller sent.
func TestCriticalityGRPCServer(t *testing.T) {
	byMethod := func(r *http.Request) criticality.Level {
		switch {
		case r.URL.Path == bUnary && r.Header.Get("X-Batch") == "1":
			return criticality.SheddablePlus
		case r.URL.Path == bUnary:
			return criticality.From(r.Context()) // the caller's, when trusted
		}
		return criticality.Sheddable
	}
	for _, tc := range []struct {
		name  string
		opts  []deadlinekit.Option
		md    []string // what the caller sends, past any interceptor
		unary string
		strm  string
	}{
		{"edge, claiming critical_plus", []deadlinekit.Option{deadlinekit.WithEdge(), deadlinekit.WithCriticality(byMethod)},
			[]string{criticality.MetadataKey, "critical_plus"}, "critical/-", "sheddable/-"},
		{"edge, batch header", []deadlinekit.Option{deadlinekit.WithEdge(), deadlinekit.WithCriticality(byMethod)},
			[]string{"x-batch", "1"}, "sheddable_plus/-", "sheddable/-"},
		{"edge without a function", []deadlinekit.Option{deadlinekit.WithEdge()},
			[]string{criticality.MetadataKey, "critical_plus"}, "critical/-", "critical/-"},
		{"trusted caller, kept by the function", []deadlinekit.Option{deadlinekit.WithCriticality(byMethod)},
			[]string{criticality.MetadataKey, "critical_plus"}, "critical_plus/[critical_plus]", "sheddable/[critical_plus]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := &levelChain{seen: map[string][]string{}}
			client := testService(t, &levelGRPC{ch: ch}, deadlinekit.ServerOptions(tc.opts...))
			ctx := metadata.AppendToOutgoingContext(context.Background(), tc.md...)
			if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
				t.Fatal(err)
			}
			s, err := client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Recv(); !errors.Is(err, io.EOF) {
				t.Fatalf("stream: %v", err)
			}
			got := ch.take()
			if !slices.Equal(got["unary"], []string{tc.unary}) || !slices.Equal(got["stream"], []string{tc.strm}) {
				t.Errorf("unary saw %q, stream %q; want %q, %q", got["unary"], got["stream"], tc.unary, tc.strm)
			}
		})
	}
}

// A connect edge never reads the level its callers send either; a malformed one
// from a trusted caller is refused InvalidArgument, naming the header.
func TestCriticalityConnectServer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []deadlinekit.Option
		claim string
		want  string
		code  connect.Code
	}{
		{"edge, claiming critical_plus", []deadlinekit.Option{deadlinekit.WithEdge()}, "critical_plus", "critical/-", 0},
		{"edge with a function", []deadlinekit.Option{deadlinekit.WithEdge(), deadlinekit.WithCriticality(func(r *http.Request) criticality.Level {
			if r.URL.Path == cUnary {
				return criticality.SheddablePlus
			}
			return criticality.Critical
		})}, "critical_plus", "sheddable_plus/-", 0},
		{"edge, malformed claim", []deadlinekit.Option{deadlinekit.WithEdge()}, "urgent", "critical/-", 0},
		{"untrusted (propagate.WithTrustGRPC)", []deadlinekit.Option{deadlinekit.WithPropagate(propagate.WithTrustGRPC(func(context.Context) bool { return false }))},
			"critical_plus", "critical/-", 0},
		{"trusted", nil, "sheddable", "sheddable/[sheddable]", 0},
		{"trusted, malformed", nil, "urgent", "", connect.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := &levelChain{seen: map[string][]string{}}
			mux := http.NewServeMux()
			mux.Handle(cUnary, connect.NewUnaryHandler(cUnary,
				func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
					ch.saw("C", ctx, req.Header().Values(criticality.Header))
					return connect.NewResponse(wrapperspb.String("ok")), nil
				}, connectkit.HandlerOption(tc.opts...)))
			srv := httptest.NewServer(mux)
			defer srv.Close()
			client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+cUnary)
			req := connect.NewRequest(wrapperspb.String("x"))
			req.Header().Set(criticality.Header, tc.claim)
			_, err := client.CallUnary(context.Background(), req)
			if tc.code != 0 {
				if connect.CodeOf(err) != tc.code || !strings.Contains(err.Error(), "malformed "+criticality.Header+" header") {
					t.Fatalf("%v; want %v naming the header", err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := ch.take()["C"]; !slices.Equal(got, []string{tc.want}) {
				t.Errorf("handler saw %q; want %q", got, tc.want)
			}
		})
	}
}

// The level an edge sets goes on the request's server span.
func TestCriticalityOnServerSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	h := deadlinekit.NewHandler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}),
		deadlinekit.WithEdge(), deadlinekit.WithCriticality(routeLevel))
	for _, path := range []string{"/prefetch", "/checkout"} {
		ctx, span := tp.Tracer("test").Start(context.Background(), path, trace.WithSpanKind(trace.SpanKindServer))
		r := httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil)
		r.Header.Set(criticality.Header, "critical_plus") // an end user's claim
		h.ServeHTTP(httptest.NewRecorder(), r)
		span.End()
	}
	want := map[string]string{"/prefetch": "sheddable", "/checkout": "critical_plus"}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	for _, s := range spans {
		var got []string
		for _, kv := range s.Attributes() {
			if kv.Key == otelattr.CriticalityKey {
				got = append(got, kv.Value.AsString())
			}
		}
		if !slices.Equal(got, []string{want[s.Name()]}) {
			t.Errorf("span %s: %s = %q; want [%s]", s.Name(), otelattr.CriticalityKey, got, want[s.Name()])
		}
	}
}

// The HTTP client side: a retried GET carries the level on both attempts.
func TestCriticalityHTTPRetry(t *testing.T) {
	ch := &levelChain{seen: map[string][]string{}}
	srv := httptest.NewServer(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ch.saw("C", r.Context(), r.Header.Values(criticality.Header))
		if ch.cRuns.Add(1) == 1 {
			http.Error(w, "first run fails", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})))
	defer srv.Close()
	client := &http.Client{Transport: deadlinekit.NewTransport(nil)}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(criticality.With(context.Background(), criticality.SheddablePlus), http.MethodGet, srv.URL, nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := []string{"sheddable_plus/[sheddable_plus]", "sheddable_plus/[sheddable_plus]"}
	if got := ch.take()["C"]; resp.StatusCode != 200 || !slices.Equal(got, want) {
		t.Errorf("status %d, server saw %q; want 200 after %q", resp.StatusCode, got, want)
	}
}
