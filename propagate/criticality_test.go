package propagate_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/otelattr"
	"github.com/deadlinekit/deadlinekit/propagate"
)

const hc = propagate.HeaderCriticality

// levelSeen is what a handler saw of the level: the level on its context and the
// header values its request still carried.
type levelSeen struct {
	mu     sync.Mutex
	level  criticality.Level
	header []string
}

func (s *levelSeen) saw(ctx context.Context, header []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.level, s.header = criticality.From(ctx), header
}

func (s *levelSeen) get() (criticality.Level, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.level, s.header
}

// levelHTTPServer serves a handler behind the middleware (opts) that notes what it
// saw of the level.
func levelHTTPServer(t *testing.T, seen *levelSeen, opts ...propagate.Option) *httptest.Server {
	srv := httptest.NewServer(propagate.NewMiddleware(opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.saw(r.Context(), r.Header.Values(hc))
	})))
	t.Cleanup(srv.Close)
	return srv
}

// The HTTP transport writes the context's level on the wire, nothing for the
// default, and replaces what a forwarded request carried; the middleware of a
// server that trusts its caller puts the level on the handler's context.
func TestHTTPCarriesLevel(t *testing.T) {
	seen := &levelSeen{}
	srv := levelHTTPServer(t, seen)
	for _, tc := range []struct {
		name      string
		ctxLevel  *criticality.Level // nil: the context has none
		forwarded string             // a level header the request already has
		deadline  bool
		want      criticality.Level
		wire      []string
	}{
		{name: "no level: nothing sent", want: criticality.Critical},
		{name: "sheddable", ctxLevel: ptr(criticality.Sheddable), want: criticality.Sheddable, wire: []string{"sheddable"}},
		{name: "critical_plus with a deadline", ctxLevel: ptr(criticality.CriticalPlus), deadline: true, want: criticality.CriticalPlus, wire: []string{"critical_plus"}},
		{name: "explicit critical: nothing sent", ctxLevel: ptr(criticality.Critical), want: criticality.Critical},
		{name: "forwarded header replaced", ctxLevel: ptr(criticality.SheddablePlus), forwarded: "critical_plus", want: criticality.SheddablePlus, wire: []string{"sheddable_plus"}},
		{name: "forwarded header removed for the default", forwarded: "critical_plus", deadline: true, want: criticality.Critical},
		{name: "forwarded header removed, no deadline", forwarded: "sheddable", want: criticality.Critical},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.ctxLevel != nil {
				ctx = criticality.With(ctx, *tc.ctxLevel)
			}
			if tc.deadline {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time5s)
				defer cancel()
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			if tc.forwarded != "" {
				req.Header.Set(hc, tc.forwarded)
			}
			before := req.Header.Clone()
			resp, err := (&http.Client{Transport: propagate.NewTransport(nil)}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			level, wire := seen.get()
			if level != tc.want || strings.Join(wire, ",") != strings.Join(tc.wire, ",") {
				t.Errorf("handler saw %v with header %q; want %v with %q", level, wire, tc.want, tc.wire)
			}
			if req.Header.Get(hc) != before.Get(hc) {
				t.Errorf("the caller's request was changed: %q", req.Header.Get(hc))
			}
		})
	}
}

// What a server makes of the level header its caller sent, over the wire: a
// trusted caller's level stands, an untrusted caller's is ignored and removed
// (it cannot promote itself), a malformed one is a 400 naming the header unless
// the server ignores malformed headers.
func TestHTTPInboundLevel(t *testing.T) {
	untrusted := propagate.WithTrustHTTP(func(*http.Request) bool { return false })
	for _, tc := range []struct {
		name   string
		values []string
		opts   []propagate.Option
		status int
		want   criticality.Level
		header []string // what the handler's request still carries
	}{
		{"trusted critical_plus", []string{"critical_plus"}, nil, 200, criticality.CriticalPlus, []string{"critical_plus"}},
		{"trusted upper case", []string{"SHEDDABLE"}, nil, 200, criticality.Sheddable, []string{"SHEDDABLE"}},
		{"untrusted critical_plus", []string{"critical_plus"}, []propagate.Option{untrusted}, 200, criticality.Critical, nil},
		{"untrusted malformed: ignored", []string{"urgent"}, []propagate.Option{untrusted}, 200, criticality.Critical, nil},
		{"malformed", []string{"urgent"}, nil, 400, 0, nil},
		{"repeated", []string{"critical_plus", "critical_plus"}, nil, 400, 0, nil},
		{"list", []string{"sheddable, critical_plus"}, nil, 400, 0, nil},
		{"malformed, ignored", []string{"urgent"}, ignoreBad, 200, criticality.Critical, []string{"urgent"}},
		{"repeated, ignored", []string{"sheddable", "critical_plus"}, ignoreBad, 200, criticality.Critical, []string{"sheddable", "critical_plus"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := &levelSeen{level: -100}
			srv := levelHTTPServer(t, seen, tc.opts...)
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			req.Header[hc] = tc.values
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d (%s); want %d", resp.StatusCode, body, tc.status)
			}
			level, header := seen.get()
			if tc.status != 200 {
				if !strings.Contains(string(body), "malformed "+hc+" header") || level != -100 {
					t.Errorf("body %q, handler ran: %v; want the header named and no handler", body, level != -100)
				}
				return
			}
			if level != tc.want || strings.Join(header, "|") != strings.Join(tc.header, "|") {
				t.Errorf("handler saw %v, header %q; want %v, %q", level, header, tc.want, tc.header)
			}
		})
	}
}

// A level read from the caller goes on the server span; none is recorded when the
// caller sent none.
func TestInboundLevelOnServerSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	h := propagate.NewMiddleware()(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, v := range []string{"sheddable_plus", ""} {
		ctx, span := tp.Tracer("test").Start(context.Background(), "server "+v, trace.WithSpanKind(trace.SpanKindServer))
		r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
		if v != "" {
			r.Header.Set(hc, v)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		span.End()
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	if got := testkit.Attrs(spans[0])[otelattr.CriticalityKey]; got.AsString() != "sheddable_plus" {
		t.Errorf("server span's %s = %v; want sheddable_plus", otelattr.CriticalityKey, got)
	}
	if got, ok := testkit.Attrs(spans[1])[otelattr.CriticalityKey]; ok {
		t.Errorf("server span of a request without a level has %s = %v", otelattr.CriticalityKey, got)
	}
}

// levelService notes the level of every call and stream it serves, and the
// metadata they still carry.
type levelService struct {
	testgrpc.UnimplementedTestServiceServer
	seen levelSeen
}

func (s *levelService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.seen.saw(ctx, metadata.ValueFromIncomingContext(ctx, criticality.MetadataKey))
	return &testgrpc.SimpleResponse{}, nil
}

func (s *levelService) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error {
	ctx := stream.Context()
	s.seen.saw(ctx, metadata.ValueFromIncomingContext(ctx, criticality.MetadataKey))
	return nil
}

// serveLevels runs svc behind propagate's server interceptors (server) on loopback
// and dials it, with the client interceptors unless raw: a raw client sends the
// metadata it is given, as a caller that does not use the toolkit.
func serveLevels(t *testing.T, svc *levelService, raw bool, server ...propagate.Option) testgrpc.TestServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(propagate.UnaryServerInterceptor(server...)),
		grpc.StreamInterceptor(propagate.StreamServerInterceptor(server...)))
	testgrpc.RegisterTestServiceServer(srv, svc)
	go srv.Serve(lis)
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if !raw {
		dial = append(dial, grpc.WithUnaryInterceptor(propagate.UnaryClientInterceptor()),
			grpc.WithStreamInterceptor(propagate.StreamClientInterceptor()))
	}
	conn, err := grpc.NewClient(lis.Addr().String(), dial...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	return testgrpc.NewTestServiceClient(conn)
}

// The gRPC interceptors carry the level in metadata, unary calls and streams alike;
// forwarded incoming metadata is corrected to the context's level.
func TestGRPCCarriesLevel(t *testing.T) {
	svc := &levelService{}
	client := serveLevels(t, svc, false)
	for _, tc := range []struct {
		name      string
		level     criticality.Level
		forwarded string
		wire      []string
	}{
		{"default: nothing sent", criticality.Critical, "", nil},
		{"sheddable", criticality.Sheddable, "", []string{"sheddable"}},
		{"critical_plus over a forwarded sheddable", criticality.CriticalPlus, "sheddable", []string{"critical_plus"}},
		{"default over a forwarded critical_plus: removed", criticality.Critical, "critical_plus", nil},
		{"same as forwarded", criticality.SheddablePlus, "sheddable_plus", []string{"sheddable_plus"}},
	} {
		for _, stream := range []bool{false, true} {
			ctx := criticality.With(context.Background(), tc.level)
			if tc.forwarded != "" {
				ctx = metadata.NewOutgoingContext(ctx, metadata.Pairs(criticality.MetadataKey, tc.forwarded, "x-other", "kept"))
			}
			var err error
			if stream {
				_, err = watch(ctx, client)
			} else {
				_, err = client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
			}
			if err != nil {
				t.Fatalf("%s (stream %v): %v", tc.name, stream, err)
			}
			level, wire := svc.seen.get()
			if level != tc.level || strings.Join(wire, ",") != strings.Join(tc.wire, ",") {
				t.Errorf("%s (stream %v): server saw %v, metadata %q; want %v, %q", tc.name, stream, level, wire, tc.level, tc.wire)
			}
		}
	}
}

// A gRPC server reads the level only from callers it trusts, and refuses a
// malformed one with InvalidArgument naming the metadata.
func TestGRPCInboundLevel(t *testing.T) {
	untrusted := propagate.WithTrustGRPC(func(context.Context) bool { return false })
	for _, tc := range []struct {
		name   string
		values []string
		opts   []propagate.Option
		code   codes.Code
		want   criticality.Level
		left   int // values the handler's metadata still holds
	}{
		{"trusted", []string{"sheddable_plus"}, nil, codes.OK, criticality.SheddablePlus, 1},
		{"untrusted promotes itself", []string{"critical_plus"}, []propagate.Option{untrusted}, codes.OK, criticality.Critical, 0},
		{"malformed", []string{"very_critical"}, nil, codes.InvalidArgument, 0, 0},
		{"two values", []string{"sheddable", "critical_plus"}, nil, codes.InvalidArgument, 0, 0},
		{"malformed, ignored", []string{"very_critical"}, ignoreBad, codes.OK, criticality.Critical, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := &levelService{}
			svc.seen.level = -100
			client := serveLevels(t, svc, true, tc.opts...)
			for _, stream := range []bool{false, true} {
				ctx := metadata.NewOutgoingContext(context.Background(), metadata.MD{criticality.MetadataKey: tc.values})
				var err error
				if stream {
					_, err = watch(ctx, client)
				} else {
					_, err = client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
				}
				if status.Code(err) != tc.code {
					t.Fatalf("stream %v: %v; want %v", stream, err, tc.code)
				}
				level, left := svc.seen.get()
				if tc.code != codes.OK {
					if !strings.Contains(status.Convert(err).Message(), "malformed "+hc+" header") || level != -100 {
						t.Errorf("stream %v: %v, handler ran: %v; want the header named and no handler", stream, err, level != -100)
					}
					continue
				}
				if level != tc.want || len(left) != tc.left {
					t.Errorf("stream %v: server saw %v, metadata %q; want %v and %d values", stream, level, left, tc.want, tc.left)
				}
			}
		})
	}
}

const time5s = 5 * time.Second

func ptr[T any](v T) *T { return &v }

// Hostile level headers, applied to the middleware directly (the header map holds
// exactly what is listed, which net/http on the wire would not always let
// through): what the handler gets, or the 400 and how long its text is.
func TestHostileLevelHTTP(t *testing.T) {
	untrusted := []propagate.Option{propagate.WithTrustHTTP(func(*http.Request) bool { return false })}
	for _, tc := range []struct {
		name   string
		values []string
		opts   []propagate.Option
		want   criticality.Level // -100: refused 400
		reason string            // for a 400: what its text says
	}{
		{"1 MiB value", []string{strings.Repeat("s", mib)}, nil, -100, "too long"},
		{"1 MiB of spaces then a level", []string{strings.Repeat(" ", mib) + "sheddable"}, nil, criticality.Sheddable, ""},
		{"CR LF and a header", []string{"sheddable\r\nX-Evil: 1"}, nil, -100, "control character"},
		{"NUL", []string{"critical\x00"}, nil, -100, "control character"},
		{"unicode", []string{"критический"}, nil, -100, "non-ASCII"},
		{"number", []string{"0"}, nil, -100, "unknown level"},
		{"empty", []string{""}, nil, -100, "empty value"},
		{"10,000 lines", dupValues("sheddable", 10000), nil, -100, "header repeated 10000 times"},
		{"two different lines", []string{"sheddable", "critical_plus"}, nil, -100, "header repeated 2 times"},
		{"mixed case, tabs", []string{"\tCritical_Plus\t"}, nil, criticality.CriticalPlus, ""},
		{"1 MiB value, ignored", []string{strings.Repeat("s", mib)}, ignoreBad, criticality.Critical, ""},
		{"10,000 lines, ignored", dupValues("sheddable", 10000), ignoreBad, criticality.Critical, ""},
		{"1 MiB value, untrusted", []string{strings.Repeat("s", mib)}, untrusted, criticality.Critical, ""},
		{"10,000 critical_plus lines, untrusted", dupValues("critical_plus", 10000), untrusted, criticality.Critical, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := criticality.Level(-100)
			h := propagate.NewMiddleware(tc.opts...)(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				got = criticality.From(r.Context())
			}))
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header[hc] = tc.values
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if got != tc.want {
				t.Fatalf("handler saw %v (status %d); want %v", got, w.Code, tc.want)
			}
			if tc.want != -100 {
				return
			}
			body := w.Body.String()
			if w.Code != http.StatusBadRequest || !strings.Contains(body, hc) || !strings.Contains(body, tc.reason) || len(body) > 256 {
				t.Errorf("answer %d %q; want 400 naming the header and %q, short", w.Code, body, tc.reason)
			}
		})
	}
}

func dupValues(v string, n int) []string {
	vs := make([]string, n)
	for i := range vs {
		vs[i] = v
	}
	return vs
}
