package reliability_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// A user's handler that panics must behave under the toolkit exactly as without it:
// the panic value comes out of every layer unchanged (net/http then recovers and logs
// it; grpc-go leaves it to the user's own recovery interceptor), no layer swallows it,
// and no layer keeps state from the request that panicked (contexts are cancelled,
// counters stay consistent, the next request is served normally).

// panicValue is what the handlers panic with: a pointer, so that identity proves the
// value came out unchanged.
type panicValue struct{ msg string }

func (p *panicValue) String() string { return p.msg }

// panicHTTPLayer is one server configuration under test; bare is the reference.
type panicHTTPLayer struct {
	name     string
	wrap     func(h http.Handler, c *shortcircuit.Counter) http.Handler
	deadline bool // the layer puts a deadline of its own on the handler's context
	guarded  bool // a shortcircuit guard (with the counter) is in the chain
}

var panicHTTPLayers = []panicHTTPLayer{
	{name: "bare", wrap: func(h http.Handler, _ *shortcircuit.Counter) http.Handler { return h }},
	{name: "propagate", wrap: func(h http.Handler, _ *shortcircuit.Counter) http.Handler {
		return propagate.NewMiddleware()(h)
	}, deadline: true},
	{name: "retry", wrap: func(h http.Handler, _ *shortcircuit.Counter) http.Handler { return retry.NewMiddleware()(h) }},
	{name: "shortcircuit", wrap: func(h http.Handler, c *shortcircuit.Counter) http.Handler {
		return shortcircuit.NewMiddleware(shortcircuit.WithObserver(c.Observe))(h)
	}, guarded: true},
	{name: "shortcircuit adaptive", wrap: func(h http.Handler, c *shortcircuit.Counter) http.Handler {
		return shortcircuit.NewMiddleware(shortcircuit.WithAdaptiveFloor(shortcircuit.DefaultAdaptive), shortcircuit.WithObserver(c.Observe))(h)
	}, guarded: true},
	{name: "full stack", wrap: func(h http.Handler, c *shortcircuit.Counter) http.Handler { return hostileHTTPStack(h, c) }, deadline: true, guarded: true},
}

// panicValues are the values a handler panics with: a plain value, the sentinel
// net/http treats specially (no log line), and panic(nil), which Go 1.21+ turns into
// a *runtime.PanicNilError.
func panicValues() []struct {
	name string
	v    any
	same func(got any) bool
} {
	pv := &panicValue{"deadlinekit-test-panic"}
	return []struct {
		name string
		v    any
		same func(got any) bool
	}{
		{"pointer", pv, func(got any) bool { return got == any(pv) }},
		{"ErrAbortHandler", http.ErrAbortHandler, func(got any) bool { return got == any(http.ErrAbortHandler) }},
		{"nil", nil, func(got any) bool { _, ok := got.(*runtime.PanicNilError); return ok }},
	}
}

// TestPanicHTTPHandlerChain calls each layer's handler chain directly: the panic value
// comes out unchanged, the request context the layer made is cancelled, the guard's
// counter does not count the request (an observer is not called for a handler that
// panicked, as documented), and the next request through the same chain is served.
func TestPanicHTTPHandlerChain(t *testing.T) {
	for _, layer := range panicHTTPLayers {
		for _, pv := range panicValues() {
			t.Run(layer.name+"/"+pv.name, func(t *testing.T) {
				var counter shortcircuit.Counter
				var handlerCtx context.Context
				boom := true
				h := layer.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					handlerCtx = r.Context()
					if boom {
						w.Header().Set("X-Partial", "1")
						panic(pv.v)
					}
					w.WriteHeader(http.StatusNoContent)
				}), &counter)
				got := func() (got any) {
					defer func() { got = recover() }()
					h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/p", nil))
					return "no panic"
				}()
				if !pv.same(got) {
					t.Fatalf("recovered %#v (%T); want the handler's panic value unchanged", got, got)
				}
				if layer.deadline {
					if _, has := handlerCtx.Deadline(); !has {
						t.Fatal("handler had no deadline")
					}
					if !errors.Is(handlerCtx.Err(), context.Canceled) {
						t.Errorf("handler context after the panic: %v; want cancelled by the layer", handlerCtx.Err())
					}
				}
				if st := counter.Stats(); st != (shortcircuit.Stats{}) {
					t.Errorf("guard counted the request that panicked: %+v", st)
				}
				boom = false
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/p", nil))
				if rec.Code != http.StatusNoContent {
					t.Errorf("next request: %d", rec.Code)
				}
				if st := counter.Stats(); layer.guarded && (st.Admitted != 1 || st.Refused() != 0) {
					t.Errorf("guard stats after the next request %+v; want 1 admitted", st)
				}
			})
		}
	}
}

// panicLogWriter hands each line net/http logs to a channel.
type panicLogWriter chan string

func (w panicLogWriter) Write(p []byte) (int, error) {
	select {
	case w <- string(p):
	default:
	}
	return len(p), nil
}

// TestPanicHTTPServer runs each layer in a real net/http server (httptest, loopback):
// whatever the layers, the client sees the same thing as with the bare handler (the
// connection closed without a response), and the server logs the same panic (or, for
// http.ErrAbortHandler, nothing).
func TestPanicHTTPServer(t *testing.T) {
	type outcome struct {
		clientErr bool
		logged    bool
		logHasVal bool
	}
	var ref map[string]outcome
	for _, layer := range panicHTTPLayers {
		got := map[string]outcome{}
		for _, pv := range panicValues() {
			logs := make(panicLogWriter, 4)
			closed := make(chan struct{}, 4)
			var counter shortcircuit.Counter
			srv := httptest.NewUnstartedServer(layer.wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(pv.v) }), &counter))
			srv.Config.ErrorLog = log.New(logs, "", 0)
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateClosed {
					closed <- struct{}{}
				}
			}
			srv.Start()
			client := srv.Client()
			resp, err := client.Get(srv.URL)
			if err == nil {
				resp.Body.Close()
			}
			<-closed // net/http logs before it closes the connection
			var o outcome
			o.clientErr = err != nil
			select {
			case line := <-logs:
				o.logged = strings.Contains(line, "http: panic serving")
				o.logHasVal = strings.Contains(line, "deadlinekit-test-panic") || strings.Contains(line, "PanicNilError") || strings.Contains(line, "nil")
			default:
			}
			client.CloseIdleConnections()
			srv.Close()
			got[pv.name] = o
			if st := counter.Stats(); st != (shortcircuit.Stats{}) {
				t.Errorf("%s/%s: guard counted the request that panicked: %+v", layer.name, pv.name, st)
			}
		}
		if layer.name == "bare" {
			ref = got
			if !ref["pointer"].clientErr || !ref["pointer"].logged || !ref["pointer"].logHasVal || ref["ErrAbortHandler"].logged {
				t.Fatalf("net/http's own behaviour is not what this test assumes: %+v", ref)
			}
			continue
		}
		for name, o := range got {
			if o != ref[name] {
				t.Errorf("%s/%s: %+v; without the toolkit %+v", layer.name, name, o, ref[name])
			}
		}
	}
}

// panicGRPCChain is one gRPC interceptor configuration under test.
type panicGRPCChain struct {
	name     string
	unary    []grpc.UnaryServerInterceptor
	stream   []grpc.StreamServerInterceptor
	deadline bool // the chain puts a deadline of its own on the handler's context
}

func panicGRPCChains(c *shortcircuit.Counter) []panicGRPCChain {
	return []panicGRPCChain{
		{name: "bare"},
		{name: "propagate", unary: []grpc.UnaryServerInterceptor{propagate.UnaryServerInterceptor()},
			// (A stream gets a deadline of propagate's only with a stream maximum.)
			stream: []grpc.StreamServerInterceptor{propagate.StreamServerInterceptor(propagate.WithMaxStreamTimeout(time.Minute))}, deadline: true},
		{name: "retry", unary: []grpc.UnaryServerInterceptor{retry.UnaryServerInterceptor()}},
		{name: "shortcircuit",
			unary:  []grpc.UnaryServerInterceptor{shortcircuit.UnaryServerInterceptor(shortcircuit.WithAdaptiveFloor(shortcircuit.DefaultAdaptive), shortcircuit.WithObserver(c.Observe))},
			stream: []grpc.StreamServerInterceptor{shortcircuit.StreamServerInterceptor(shortcircuit.WithObserver(c.Observe))}},
		{name: "full stack",
			unary: []grpc.UnaryServerInterceptor{propagate.UnaryServerInterceptor(), retry.UnaryServerInterceptor(),
				shortcircuit.UnaryServerInterceptor(shortcircuit.WithFloor(time.Millisecond), shortcircuit.WithObserver(c.Observe))},
			stream: []grpc.StreamServerInterceptor{propagate.StreamServerInterceptor(propagate.WithMaxStreamTimeout(time.Minute)),
				shortcircuit.StreamServerInterceptor(shortcircuit.WithFloor(time.Millisecond), shortcircuit.WithObserver(c.Observe))},
			deadline: true},
	}
}

func chainUnary(ics []grpc.UnaryServerInterceptor, h grpc.UnaryHandler) grpc.UnaryHandler {
	for i := len(ics) - 1; i >= 0; i-- {
		ic, next := ics[i], h
		h = func(ctx context.Context, req any) (any, error) {
			return ic(ctx, req, &grpc.UnaryServerInfo{FullMethod: "/svc/Panic"}, next)
		}
	}
	return h
}

type panicStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *panicStream) Context() context.Context { return s.ctx }

func chainStream(ics []grpc.StreamServerInterceptor, h grpc.StreamHandler) grpc.StreamHandler {
	for i := len(ics) - 1; i >= 0; i-- {
		ic, next := ics[i], h
		h = func(srv any, ss grpc.ServerStream) error {
			return ic(srv, ss, &grpc.StreamServerInfo{FullMethod: "/svc/PanicStream"}, next)
		}
	}
	return h
}

// TestPanicGRPCInterceptors calls each interceptor chain directly, unary and stream,
// with a handler that panics: the value comes out unchanged (no interceptor recovers
// it), the context the chain made is cancelled, the guard does not count the call,
// and the next call through the same chain is served and counted.
func TestPanicGRPCInterceptors(t *testing.T) {
	var counter shortcircuit.Counter
	for _, chain := range panicGRPCChains(&counter) {
		for _, kind := range []string{"unary", "stream"} {
			for _, pv := range panicValues() {
				t.Run(chain.name+"/"+kind+"/"+pv.name, func(t *testing.T) {
					counter = shortcircuit.Counter{}
					var handlerCtx context.Context
					boom := true
					call := func() error {
						if kind == "unary" {
							_, err := chainUnary(chain.unary, func(ctx context.Context, _ any) (any, error) {
								handlerCtx = ctx
								if boom {
									panic(pv.v)
								}
								return "ok", nil
							})(context.Background(), nil)
							return err
						}
						return chainStream(chain.stream, func(_ any, ss grpc.ServerStream) error {
							handlerCtx = ss.Context()
							if boom {
								panic(pv.v)
							}
							return nil
						})(nil, &panicStream{ctx: context.Background()})
					}
					got := func() (got any) {
						defer func() { got = recover() }()
						_ = call()
						return "no panic"
					}()
					if !pv.same(got) {
						t.Fatalf("recovered %#v (%T); want the handler's panic value unchanged", got, got)
					}
					if chain.deadline && !errors.Is(handlerCtx.Err(), context.Canceled) {
						t.Errorf("handler context after the panic: %v; want cancelled by the interceptor", handlerCtx.Err())
					}
					if st := counter.Stats(); st != (shortcircuit.Stats{}) {
						t.Errorf("guard counted the call that panicked: %+v", st)
					}
					boom = false
					if err := call(); err != nil {
						t.Fatalf("next call: %v", err)
					}
					guarded := (kind == "unary" && len(chain.unary) > 0 && chain.name != "propagate" && chain.name != "retry") ||
						(kind == "stream" && (chain.name == "shortcircuit" || chain.name == "full stack"))
					if st := counter.Stats(); guarded && st.Admitted != 1 {
						t.Errorf("guard stats after the next call %+v; want 1 admitted", st)
					}
				})
			}
		}
	}
}

// panicService panics on demand.
type panicService struct {
	testgrpc.UnimplementedTestServiceServer
	v any
}

func (s *panicService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if len(metadata.ValueFromIncomingContext(ctx, "x-panic")) > 0 {
		panic(s.v)
	}
	return &testgrpc.SimpleResponse{}, nil
}

func (s *panicService) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, ss testgrpc.TestService_StreamingOutputCallServer) error {
	if len(metadata.ValueFromIncomingContext(ss.Context(), "x-panic")) > 0 {
		panic(s.v)
	}
	return nil
}

// TestPanicGRPCServer runs each chain in a real grpc-go server whose outermost
// interceptor is the user's own recovery (grpc-go itself recovers nothing): the
// recovery sees the handler's panic value unchanged, the client gets the same status
// as without the toolkit, the guard does not count the call, and the next call on the
// same server is served.
func TestPanicGRPCServer(t *testing.T) {
	pv := &panicValue{"deadlinekit-test-panic"}
	type outcome struct {
		code codes.Code
		msg  string
	}
	var ref map[string]outcome
	var counter shortcircuit.Counter
	for _, chain := range panicGRPCChains(&counter) {
		counter = shortcircuit.Counter{}
		recovered := make(chan any, 1)
		recoverUnary := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
			defer func() {
				if r := recover(); r != nil {
					recovered <- r
					err = status.Errorf(codes.Internal, "recovered: %v", r)
				}
			}()
			return h(ctx, req)
		}
		recoverStream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
			defer func() {
				if r := recover(); r != nil {
					recovered <- r
					err = status.Errorf(codes.Internal, "recovered: %v", r)
				}
			}()
			return h(srv, ss)
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gs := grpc.NewServer(
			grpc.ChainUnaryInterceptor(append([]grpc.UnaryServerInterceptor{recoverUnary}, chain.unary...)...),
			grpc.ChainStreamInterceptor(append([]grpc.StreamServerInterceptor{recoverStream}, chain.stream...)...))
		testgrpc.RegisterTestServiceServer(gs, &panicService{v: pv})
		served := make(chan struct{})
		go func() { defer close(served); _ = gs.Serve(lis) }()
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		client := testgrpc.NewTestServiceClient(conn)
		got := map[string]outcome{}
		for _, kind := range []string{"unary", "stream"} {
			ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-panic", "1"), 5*time.Second)
			var err error
			if kind == "unary" {
				_, err = client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
			} else {
				var s testgrpc.TestService_StreamingOutputCallClient
				if s, err = client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{}); err == nil {
					_, err = s.Recv()
				}
			}
			cancel()
			st := status.Convert(err)
			got[kind] = outcome{st.Code(), st.Message()}
			select {
			case r := <-recovered:
				if r != any(pv) {
					t.Errorf("%s/%s: the recovery interceptor got %#v; want the handler's value", chain.name, kind, r)
				}
			default:
				t.Errorf("%s/%s: the recovery interceptor saw no panic", chain.name, kind)
			}
			if s := counter.Stats(); s != (shortcircuit.Stats{}) {
				t.Errorf("%s/%s: guard counted the call that panicked: %+v", chain.name, kind, s)
			}
			// The next call on the same server and connection is served.
			ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
			if kind == "unary" {
				_, err = client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
			} else {
				var s testgrpc.TestService_StreamingOutputCallClient
				if s, err = client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{}); err == nil {
					if _, err = s.Recv(); err == io.EOF {
						err = nil
					}
				}
			}
			cancel()
			if err != nil {
				t.Errorf("%s/%s: next call: %v", chain.name, kind, err)
			}
			counter = shortcircuit.Counter{}
		}
		conn.Close()
		gs.Stop()
		<-served
		if chain.name == "bare" {
			ref = got
			if ref["unary"].code != codes.Internal || !strings.Contains(ref["unary"].msg, "deadlinekit-test-panic") {
				t.Fatalf("reference outcome %+v", ref)
			}
			continue
		}
		for k, o := range got {
			if o != ref[k] {
				t.Errorf("%s/%s: client got %+v; without the toolkit %+v", chain.name, k, o, ref[k])
			}
		}
	}
}

// TestPanicUserCallbacks pins what happens when a function the user gives to the
// toolkit panics. Server-side callbacks (propagate's trust functions, shortcircuit's
// floor function and observers) are not recovered: the panic leaves the middleware
// or interceptor unchanged, before the handler runs, like a panic of the handler
// itself, and net/http (or the user's recovery interceptor) deals with it.
// Client-side callbacks (retry's classifier, key generator and observers, hedge's
// observers) run on the caller's goroutine: their panic is the caller's, and leaves
// RoundTrip or the interceptor unchanged (issue 14, item 2).
func TestPanicUserCallbacks(t *testing.T) {
	pv := &panicValue{"callback-panic"}
	boom := func() { panic(pv) }
	handlerRan := false
	okHandler := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { handlerRan = true })
	okUnary := func(context.Context, any) (any, error) { handlerRan = true; return nil, nil }
	withDeadline := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Second)
	}

	propagates := []struct {
		name string
		run  func()
	}{
		{"propagate.WithTrustHTTP", func() {
			propagate.NewMiddleware(propagate.WithTrustHTTP(func(*http.Request) bool { boom(); return true }))(okHandler).
				ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
		}},
		{"propagate.WithTrustGRPC", func() {
			_, _ = propagate.UnaryServerInterceptor(propagate.WithTrustGRPC(func(context.Context) bool { boom(); return true }))(
				context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/s/m"}, okUnary)
		}},
		{"shortcircuit.WithFloorFunc (HTTP)", func() {
			ctx, cancel := withDeadline()
			defer cancel()
			shortcircuit.NewMiddleware(shortcircuit.WithFloorFunc(func(string) time.Duration { boom(); return 0 }))(okHandler).
				ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx))
		}},
		{"shortcircuit.WithFloorFunc (gRPC)", func() {
			ctx, cancel := withDeadline()
			defer cancel()
			_, _ = shortcircuit.UnaryServerInterceptor(shortcircuit.WithFloorFunc(func(string) time.Duration { boom(); return 0 }))(
				ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/s/m"}, okUnary)
		}},
		{"retry.WithObserver", func() {
			req := httptest.NewRequest(http.MethodGet, "http://down.test/", nil)
			req.RequestURI = ""
			tr := retry.NewTransport(panicRoundTrip(func(r *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
			}), retry.WithObserver(func(context.Context, retry.Event) { boom() }))
			if resp, err := tr.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		}},
		{"retry.WithClassifier", func() {
			req := httptest.NewRequest(http.MethodGet, "http://down.test/", nil)
			req.RequestURI = ""
			tr := retry.NewTransport(panicRoundTrip(func(r *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: http.StatusServiceUnavailable, Body: http.NoBody, Request: r}, nil
			}), retry.WithBudget(nil), retry.WithBackoff(retry.Backoff{}),
				retry.WithClassifier(func(retry.Event) retry.Verdict { boom(); return retry.Answered }))
			if resp, err := tr.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		}},
		{"retry.WithIdempotencyKeys", func() {
			req := httptest.NewRequest(http.MethodPost, "http://down.test/", nil)
			req.RequestURI = ""
			tr := retry.NewTransport(panicRoundTrip(func(r *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
			}), retry.WithIdempotencyKeys(func() string { boom(); return "" }))
			if resp, err := tr.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		}},
		{"shortcircuit.WithObserver on refusal", func() {
			ctx, cancel := context.WithTimeout(context.Background(), -time.Second)
			defer cancel()
			shortcircuit.NewMiddleware(shortcircuit.WithObserver(func(context.Context, shortcircuit.Event) { boom() }))(okHandler).
				ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx))
		}},
	}
	for _, tc := range propagates {
		handlerRan = false
		got := func() (got any) {
			defer func() { got = recover() }()
			tc.run()
			return nil
		}()
		if got != any(pv) {
			t.Errorf("%s: recovered %#v; want the callback's panic to propagate unchanged", tc.name, got)
		}
		if handlerRan {
			t.Errorf("%s: the handler ran", tc.name)
		}
	}

	// shortcircuit observer after the handler: the handler has run and answered;
	// the observer's panic still propagates.
	handlerRan = false
	got := func() (got any) {
		defer func() { got = recover() }()
		shortcircuit.NewMiddleware(shortcircuit.WithObserver(func(context.Context, shortcircuit.Event) { boom() }))(okHandler).
			ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
		return nil
	}()
	if got != any(pv) || !handlerRan {
		t.Errorf("shortcircuit.WithObserver on admission: recovered %#v, handler ran %v; want the panic after the handler", got, handlerRan)
	}

	// hedge: the observer's panic propagates unchanged.
	h := hedge.NewTransport(panicRoundTrip(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
	}), hedge.WithObserver(func(context.Context, hedge.Event) { boom() }))
	req := httptest.NewRequest(http.MethodGet, "http://down.test/", nil)
	req.RequestURI = ""
	got = func() (got any) {
		defer func() { got = recover() }()
		if resp, err := h.RoundTrip(req); err == nil {
			resp.Body.Close()
		}
		return nil
	}()
	if got != any(pv) {
		t.Errorf("hedge with a panicking observer: recovered %#v; want the observer's panic to propagate unchanged", got)
	}
}

type panicRoundTrip func(*http.Request) (*http.Response, error)

func (f panicRoundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
