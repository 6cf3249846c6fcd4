package propagate_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/propagate"
)

// pipeListener is a net.Listener of in-memory connections (net.Pipe), so that a real
// gRPC or HTTP server runs inside a synctest bubble: a goroutine waiting on a pipe is
// durably blocked, and fake time moves.
type pipeListener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial(ctx context.Context, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// watchService is a server stream that sends one message per minute, for as long as
// its context lives, up to n messages; what its context looked like is noted.
type watchService struct {
	testgrpc.UnimplementedTestServiceServer
	n        int
	mu       sync.Mutex
	deadline time.Duration // time left on the stream's context on arrival; 0: none
	unary    time.Duration // the same for a unary call
}

func (s *watchService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	left, _ := deadline.Remaining(ctx)
	s.mu.Lock()
	s.unary = left
	s.mu.Unlock()
	return &testgrpc.SimpleResponse{}, nil
}

func (s *watchService) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error {
	ctx := stream.Context()
	left, _ := deadline.Remaining(ctx)
	s.mu.Lock()
	s.deadline = left
	s.mu.Unlock()
	for range s.n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Minute):
		}
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	return nil
}

// serveWatch runs svc behind propagate's server interceptors (opts) on an in-memory
// listener, inside the calling synctest bubble, and dials it.
func serveWatch(t *testing.T, svc *watchService, opts ...propagate.Option) testgrpc.TestServiceClient {
	t.Helper()
	lis := newPipeListener()
	srv := grpc.NewServer(grpc.UnaryInterceptor(propagate.UnaryServerInterceptor(opts...)),
		grpc.StreamInterceptor(propagate.StreamServerInterceptor(opts...)))
	testgrpc.RegisterTestServiceServer(srv, svc)
	go srv.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///pipe", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(lis.dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	return testgrpc.NewTestServiceClient(conn)
}

// watch opens a server stream under ctx and reads it to its end; it returns the
// number of messages and the error that ended it (nil: the server ended it well).
func watch(ctx context.Context, client testgrpc.TestServiceClient) (int, error) {
	stream, err := client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
	if err != nil {
		return 0, err
	}
	n := 0
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return n, err
		}
		n++
	}
}

// A gRPC stream that came without a deadline gets none: a watch runs past the 30 s a
// unary call without deadline gets, for as long as it has something to say.
func TestGRPCStreamGetsNoDefaultBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := &watchService{n: 3}
		client := serveWatch(t, svc)
		n, err := watch(context.Background(), client)
		if err != nil || n != 3 {
			t.Errorf("the watch ended after %d messages with %v; want 3 messages (3 minutes) and a clean end", n, err)
		}
		if svc.deadline != 0 {
			t.Errorf("the stream's context had %v left; want no deadline", svc.deadline)
		}
		if _, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
		if svc.unary != deadline.DefaultBudget {
			t.Errorf("a unary call without deadline had %v; want the default %v", svc.unary, deadline.DefaultBudget)
		}
	})
}

// The clamp (WithMaxTimeout) is for unary calls: a stream keeps the deadline its
// caller stated, however long; a unary call is cut to the maximum.
func TestGRPCStreamKeepsItsCallersDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := &watchService{n: 3}
		client := serveWatch(t, svc, propagate.WithMaxTimeout(time.Minute))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		n, err := watch(ctx, client)
		if err != nil || n != 3 {
			t.Errorf("the watch ended after %d messages with %v; want 3 messages and a clean end", n, err)
		}
		if svc.deadline <= time.Minute {
			t.Errorf("the stream's context had %v left; want its caller's 10 minutes, not the unary clamp", svc.deadline)
		}
		if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
		if svc.unary != time.Minute {
			t.Errorf("a unary call asking for 10 minutes had %v; want the clamp, 1m0s", svc.unary)
		}
	})
}

// WithMaxStreamTimeout bounds every stream's life: one without deadline gets it, one
// whose caller asked for more is cut to it, and the handler's context ends there.
func TestGRPCMaxStreamTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := &watchService{n: 10}
		client := serveWatch(t, svc, propagate.WithMaxStreamTimeout(150*time.Second))
		for _, asked := range []time.Duration{0, time.Hour} {
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if asked > 0 {
				ctx, cancel = context.WithTimeout(ctx, asked)
			}
			n, err := watch(ctx, client)
			cancel()
			if n != 2 || err == nil {
				t.Errorf("asked %v: the watch ended after %d messages with %v; want 2 (150 s) and the deadline's error", asked, n, err)
			}
			if svc.deadline != 150*time.Second {
				t.Errorf("asked %v: the stream's context had %v; want 2m30s", asked, svc.deadline)
			}
		}
	})
}

// Over HTTP, a route the server declared streaming gets no default budget and no
// clamp, and lives for minutes on fake time; a plain route gets both, even when its
// request accepts text/event-stream.
func TestHTTPEventStreamGetsNoDefaultBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		seen := map[string]time.Duration{}
		h := propagate.NewMiddleware(propagate.WithMaxTimeout(time.Minute),
			propagate.WithStreamingHTTP(propagate.StreamingRoutes("GET /events")))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			left, _ := deadline.Remaining(r.Context())
			mu.Lock()
			seen[r.URL.Path] = left
			mu.Unlock()
			if r.URL.Path != "/events" {
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			for range 3 {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(time.Minute):
				}
				io.WriteString(w, "data: tick\n\n")
				http.NewResponseController(w).Flush()
			}
		}))
		lis := newPipeListener()
		srv := &http.Server{Handler: h}
		go srv.Serve(lis)
		defer srv.Close()
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return lis.dial(ctx, addr) }}}
		defer hc.CloseIdleConnections()

		get := func(path, accept, timeout string) (*http.Response, error) {
			req, _ := http.NewRequest("GET", "http://pipe"+path, nil)
			if accept != "" {
				req.Header.Set("Accept", accept)
			}
			if timeout != "" {
				req.Header.Set("grpc-timeout", timeout)
			}
			return hc.Do(req)
		}
		for _, c := range []struct{ timeout string }{{""}, {"10M"}} {
			resp, err := get("/events", "text/event-stream", c.timeout)
			if err != nil {
				t.Fatal(err)
			}
			ticks := 0
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if sc.Text() == "data: tick" {
					ticks++
				}
			}
			resp.Body.Close()
			if ticks != 3 {
				t.Errorf("grpc-timeout %q: the event stream sent %d ticks; want 3 (3 minutes)", c.timeout, ticks)
			}
			want := time.Duration(0)
			if c.timeout != "" {
				want = 10 * time.Minute
			}
			if got := seen["/events"]; got != want {
				t.Errorf("grpc-timeout %q: the stream's context had %v; want %v (no default, no clamp)", c.timeout, got, want)
			}
		}
		for _, c := range []struct {
			accept, timeout string
			want            time.Duration
		}{{"", "", deadline.DefaultBudget}, {"", "10M", time.Minute}, {"text/event-stream", "", deadline.DefaultBudget}, {"text/event-stream", "10M", time.Minute}} {
			resp, err := get("/plain", c.accept, c.timeout)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := seen["/plain"]; got != c.want {
				t.Errorf("plain route, Accept %q, grpc-timeout %q: %v; want %v", c.accept, c.timeout, got, c.want)
			}
		}
	})
}

// Which HTTP requests are streams by default, including Accept values built to
// mislead a parser.
func TestStreamingRequest(t *testing.T) {
	for _, c := range []struct {
		name   string
		header map[string]string
		want   bool
	}{
		{"plain", nil, false},
		{"event stream", map[string]string{"Accept": "text/event-stream"}, true},
		{"case", map[string]string{"Accept": "Text/Event-Stream"}, true},
		{"in a list", map[string]string{"Accept": "application/json, text/event-stream;q=0.5"}, true},
		{"spaces", map[string]string{"Accept": "  text/event-stream  ; charset=utf-8"}, true},
		{"refused with q=0", map[string]string{"Accept": "text/event-stream;q=0"}, false},
		{"refused with q=0.000", map[string]string{"Accept": "text/event-stream; Q=0.000"}, false},
		{"garbage q", map[string]string{"Accept": "text/event-stream;q=x"}, true},
		{"prefix only", map[string]string{"Accept": "text/event-streaming"}, false},
		{"wildcard", map[string]string{"Accept": "*/*"}, false},
		{"empty", map[string]string{"Accept": ""}, false},
		{"commas", map[string]string{"Accept": ",,,;;;==="}, false},
		{"websocket", map[string]string{"Upgrade": "websocket", "Connection": "Upgrade"}, true},
		{"h2c upgrade: a plain request", map[string]string{"Upgrade": "H2C", "Connection": "Upgrade, HTTP2-Settings"}, false},
		{"connect stream", map[string]string{"Content-Type": "application/connect+proto"}, true},
		{"connect unary", map[string]string{"Content-Type": "application/proto"}, false},
		{"grpc (unary or not: the interceptors tell)", map[string]string{"Content-Type": "application/grpc"}, false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		for k, v := range c.header {
			r.Header.Set(k, v)
		}
		if got := propagate.StreamingRequest(r); got != c.want {
			t.Errorf("%s: StreamingRequest = %v; want %v", c.name, got, c.want)
		}
	}
}

// With no option, or WithStreamingHTTP(nil), every HTTP request is a unary one, event
// streams and upgrades included; a predicate of the user's makes a route a stream,
// and StreamingRequest narrows a declared route to the requests that ask to stream.
func TestWithStreamingHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var left time.Duration
		h := func(opts ...propagate.Option) http.Handler {
			return propagate.NewMiddleware(opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				left, _ = deadline.Remaining(r.Context())
			}))
		}
		sse := httptest.NewRequest("GET", "/events", nil)
		sse.Header.Set("Accept", "text/event-stream")
		sse.Header.Set("Upgrade", "websocket")
		for name, opts := range map[string][]propagate.Option{"no option": nil, "WithStreamingHTTP(nil)": {propagate.WithStreamingHTTP(nil)}} {
			left = 0
			h(opts...).ServeHTTP(httptest.NewRecorder(), sse)
			if left != deadline.DefaultBudget {
				t.Errorf("%s: a request claiming a stream had %v left; want the unary default", name, left)
			}
		}
		download := httptest.NewRequest("GET", "/download/big.iso", nil)
		h(propagate.WithStreamingHTTP(func(r *http.Request) bool { return r.URL.Path != "/" })).ServeHTTP(httptest.NewRecorder(), download)
		if left != 0 {
			t.Errorf("a route the predicate calls streaming had %v left; want no deadline", left)
		}
		feed := propagate.StreamingRoutes("GET /events")
		negotiated := propagate.WithStreamingHTTP(func(r *http.Request) bool { return feed(r) && propagate.StreamingRequest(r) })
		h(negotiated).ServeHTTP(httptest.NewRecorder(), sse)
		if left != 0 {
			t.Errorf("a declared route asked for a stream had %v left; want no deadline", left)
		}
		h(negotiated).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/events", nil))
		if left != deadline.DefaultBudget {
			t.Errorf("a declared route asked for a plain answer had %v left; want the unary default", left)
		}
	})
}

// StreamingRoutes matches as http.ServeMux does: methods, wildcards, subtrees,
// hosts; a redirect or a 405 is not a stream.
func TestStreamingRoutes(t *testing.T) {
	is := propagate.StreamingRoutes("GET /events", "/ws/{room}", "/pkg.Store/", "feeds.example.com/live", "GET /events")
	for _, c := range []struct {
		method, target string
		want           bool
	}{
		{"GET", "/events", true},
		{"HEAD", "/events", true}, // GET patterns match HEAD, as in the mux
		{"POST", "/events", false},
		{"GET", "/events/1", false},
		{"GET", "/ws/lobby", true},
		{"GET", "/ws/lobby/x", false},
		{"POST", "/pkg.Store/Watch", true},
		{"POST", "/pkg.Store", false},  // the mux redirects it to /pkg.Store/
		{"GET", "/a/../events", false}, // the mux redirects it to the clean path
		{"GET", "http://feeds.example.com/live", true},
		{"GET", "http://other.example.com/live", false},
		{"GET", "/", false},
	} {
		if got := is(httptest.NewRequest(c.method, c.target, nil)); got != c.want {
			t.Errorf("%s %s: stream %v; want %v", c.method, c.target, got, c.want)
		}
	}
}

// FuzzStreamingRequest: any Accept value is read without a panic, and only one that
// names text/event-stream makes a request a stream.
func FuzzStreamingRequest(f *testing.F) {
	for _, s := range []string{"text/event-stream", "text/event-stream;q=0", "a/b, text/event-stream ; q=0.5", ",;=", "text/event-stream;q=NaN", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, accept string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["Accept"] = []string{accept}
		got := propagate.StreamingRequest(r)
		if got && !strings.Contains(strings.ToLower(accept), "text/event-stream") {
			t.Errorf("Accept %q: a stream; want none without text/event-stream", accept)
		}
	})
}
