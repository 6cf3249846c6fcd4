package propagate_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/propagate"
)

// What a handler saw of its deadline, sent from the server to the test.
type sawDeadline struct {
	in     propagate.Inbound
	found  bool          // the handler found an Inbound
	has    bool          // its context had a deadline
	ahead  time.Duration // that deadline, from when the handler ran
	status int           // what the client got
}

// noteDeadline notes what each request found on its context on seen, without
// ever blocking the server.
func noteDeadline(seen chan<- sawDeadline) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, found := propagate.InboundFromContext(r.Context())
		dl, has := r.Context().Deadline()
		select {
		case seen <- sawDeadline{in: in, found: found, has: has, ahead: time.Until(dl)}:
		default:
		}
		io.WriteString(w, "ok")
	})
}

// serverStacks are the two ways a user puts propagate in front of a handler: its
// middleware alone, and the whole server stack of the root package. Both take the
// same propagate options.
var serverStacks = []struct {
	name string
	wrap func(h http.Handler, opts ...propagate.Option) http.Handler
}{
	{"NewMiddleware", func(h http.Handler, opts ...propagate.Option) http.Handler {
		return propagate.NewMiddleware(opts...)(h)
	}},
	{"deadlinekit.NewHandler", func(h http.Handler, opts ...propagate.Option) http.Handler {
		return deadlinekit.NewHandler(h, deadlinekit.WithPropagate(opts...))
	}},
}

// send makes one request to url with the header pairs hdr (name, value, …) and
// returns what the handler saw (the zero value when it did not run).
func send(t *testing.T, method, url string, hdr []string, seen <-chan sawDeadline) sawDeadline {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(`{"op":"charge"}`))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	var got sawDeadline
	select {
	case got = <-seen:
	default:
	}
	got.status = resp.StatusCode
	return got
}

// A caller cannot lift a unary handler's default budget or clamp by claiming that it
// wants a stream: Accept: text/event-stream, an Upgrade: websocket, or a Connect
// streaming content type, sent on an ordinary POST to a route the server did not
// declare streaming, leave the handler its 30 s default and its 5 minute clamp,
// behind the middleware and behind the whole stack alike, over loopback.
func TestStreamClaimsDoNotLiftUnaryRules(t *testing.T) {
	const years = "99999999H"
	sse := []string{"Accept", "text/event-stream"}
	ws := []string{"Upgrade", "websocket", "Connection", "Upgrade", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}
	connectStream := []string{"Content-Type", "application/connect+json"}
	timeout := []string{"Grpc-Timeout", years}
	cases := []struct {
		name    string
		hdr     []string
		budget  time.Duration
		source  string
		clamped bool
	}{
		{"no claim, no deadline (baseline)", nil, deadline.DefaultBudget, propagate.SourceDefault, false},
		{"Accept: text/event-stream", sse, deadline.DefaultBudget, propagate.SourceDefault, false},
		{"Upgrade: websocket", ws, deadline.DefaultBudget, propagate.SourceDefault, false},
		{"Accept and Upgrade", pairs(sse, ws), deadline.DefaultBudget, propagate.SourceDefault, false},
		{"Connect streaming content type", connectStream, deadline.DefaultBudget, propagate.SourceDefault, false},
		{"Accept, years", pairs(sse, timeout), propagate.DefaultMaxTimeout, propagate.SourceGRPCTimeout, true},
		{"Upgrade, years", pairs(ws, timeout), propagate.DefaultMaxTimeout, propagate.SourceGRPCTimeout, true},
		{"Accept and Upgrade, years", pairs(sse, ws, timeout), propagate.DefaultMaxTimeout, propagate.SourceGRPCTimeout, true},
		{"every claim at once, years", pairs(sse, ws, connectStream, timeout), propagate.DefaultMaxTimeout, propagate.SourceGRPCTimeout, true},
	}
	for _, stack := range serverStacks {
		t.Run(stack.name, func(t *testing.T) {
			seen := make(chan sawDeadline, 1)
			srv := httptest.NewServer(stack.wrap(noteDeadline(seen)))
			defer srv.Close()
			for _, c := range cases {
				got := send(t, http.MethodPost, srv.URL+"/charge", c.hdr, seen)
				if got.status != http.StatusOK || !got.found {
					t.Errorf("%s: status %d, handler found an Inbound: %v; want 200 and one", c.name, got.status, got.found)
					continue
				}
				if want := (propagate.Inbound{Budget: c.budget, Source: c.source, Clamped: c.clamped}); got.in != want {
					t.Errorf("%s: Inbound %+v; want %+v", c.name, got.in, want)
				}
				if !got.has || got.ahead > c.budget {
					t.Errorf("%s: handler's deadline: %v, %v ahead; want one at most %v ahead", c.name, got.has, got.ahead, c.budget)
				}
			}
		})
	}
}

// pairs joins lists of header pairs into one.
func pairs(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// A route the server declared streaming (StreamingRoutes, passed by
// WithStreamingHTTP) gets no default budget and no unary clamp: it keeps the
// caller's deadline or none, bounded by WithMaxStreamTimeout when the server sets
// one. The routes beside it, on the same server, keep the unary rules whatever the
// request claims.
func TestDeclaredStreamRoute(t *testing.T) {
	const hour = time.Hour
	sse := []string{"Accept", "text/event-stream"}
	cases := []struct {
		name      string
		maxStream time.Duration
		method    string
		path      string
		hdr       []string
		budget    time.Duration // noDeadline: none
		source    string
		clamped   bool
	}{
		{"declared, no deadline: none", 0, "GET", "/events", nil, noDeadline, "", false},
		{"declared, 10 minutes: kept past the unary clamp", 0, "GET", "/events", []string{"Grpc-Timeout", "10M"}, 10 * time.Minute, propagate.SourceGRPCTimeout, false},
		{"declared, no deadline, stream maximum: the maximum", hour, "GET", "/events", nil, hour, propagate.SourceDefault, false},
		{"declared, years, stream maximum: bounded by it", hour, "GET", "/events", []string{"Grpc-Timeout", "99999999H"}, hour, propagate.SourceGRPCTimeout, true},
		{"declared, 10 minutes, stream maximum: kept", hour, "GET", "/events", []string{"Grpc-Timeout", "10M"}, 10 * time.Minute, propagate.SourceGRPCTimeout, false},
		{"declared for GET only: a POST there is unary", 0, "POST", "/events", sse, deadline.DefaultBudget, propagate.SourceDefault, false},
		{"undeclared route beside it, claiming: unary", hour, "POST", "/charge", pairs(sse, []string{"Grpc-Timeout", "99999999H"}), propagate.DefaultMaxTimeout, propagate.SourceGRPCTimeout, true},
	}
	for _, stack := range serverStacks {
		t.Run(stack.name, func(t *testing.T) {
			for _, c := range cases {
				seen := make(chan sawDeadline, 1)
				srv := httptest.NewServer(stack.wrap(noteDeadline(seen),
					propagate.WithStreamingHTTP(propagate.StreamingRoutes("GET /events")),
					propagate.WithMaxStreamTimeout(c.maxStream)))
				got := send(t, c.method, srv.URL+c.path, c.hdr, seen)
				srv.Close()
				if got.status != http.StatusOK {
					t.Fatalf("%s: status %d; want 200", c.name, got.status)
				}
				if c.budget == noDeadline {
					if got.has || got.found {
						t.Errorf("%s: handler got a deadline %v ahead (%+v); want none", c.name, got.ahead, got.in)
					}
					continue
				}
				if want := (propagate.Inbound{Budget: c.budget, Source: c.source, Clamped: c.clamped}); got.in != want {
					t.Errorf("%s: Inbound %+v; want %+v", c.name, got.in, want)
				}
				if !got.has || got.ahead > c.budget {
					t.Errorf("%s: handler's deadline: %v, %v ahead; want one at most %v ahead", c.name, got.has, got.ahead, c.budget)
				}
			}
		})
	}
}

// A WebSocket route the server declared still upgrades, with no default budget on
// the connection's handler; the same Upgrade request to a route beside it that the
// server did not declare gets the unary default.
func TestDeclaredUpgradeRoute(t *testing.T) {
	for _, stack := range serverStacks {
		t.Run(stack.name, func(t *testing.T) {
			seen := make(chan sawDeadline, 1)
			mux := http.NewServeMux()
			mux.Handle("/plain", noteDeadline(seen))
			mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
				dl, has := r.Context().Deadline()
				seen <- sawDeadline{has: has, ahead: time.Until(dl)}
				conn, rw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("hijack: %v", err)
					return
				}
				defer conn.Close()
				rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
				rw.Flush()
				line, _ := rw.ReadString('\n')
				rw.WriteString("echo " + line)
				rw.Flush()
			})
			srv := httptest.NewServer(stack.wrap(mux, propagate.WithStreamingHTTP(propagate.StreamingRoutes("GET /ws"))))
			defer srv.Close()

			req, _ := http.NewRequest("GET", srv.URL+"/ws", nil)
			req.Header.Set("Upgrade", "websocket")
			req.Header.Set("Connection", "Upgrade")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("status %d; want 101", resp.StatusCode)
			}
			got := <-seen
			if got.has {
				t.Errorf("the declared WebSocket route's handler had a deadline %v ahead; want none", got.ahead)
			}
			conn := resp.Body.(io.ReadWriteCloser)
			io.WriteString(conn, "ping\n")
			if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || line != "echo ping\n" {
				t.Errorf("over the upgraded connection: %q, %v; want the echo", line, err)
			}

			got = send(t, "GET", srv.URL+"/plain", []string{"Upgrade", "websocket", "Connection", "Upgrade"}, seen)
			if want := (propagate.Inbound{Budget: deadline.DefaultBudget, Source: propagate.SourceDefault}); got.status != 200 || got.in != want {
				t.Errorf("an Upgrade to an undeclared route: status %d, Inbound %+v; want 200 and %+v", got.status, got.in, want)
			}
		})
	}
}

// A connect service behind the whole stack: its route declared streaming at the HTTP
// layer, connectkit.HandlerOption on its handlers. The HTTP layer leaves the
// route's deadlines alone, and the interceptor, which knows each procedure's stream
// type, gives a server stream its caller's deadline or none and a unary procedure
// the default budget and the clamp, whatever the caller claims and asks for.
func TestDeclaredConnectRoute(t *testing.T) {
	type msg = wrapperspb.StringValue
	var streamSaw, unarySaw atomic.Pointer[sawDeadline]
	note := func(p *atomic.Pointer[sawDeadline], ctx context.Context) {
		in, found := propagate.InboundFromContext(ctx)
		dl, has := ctx.Deadline()
		p.Store(&sawDeadline{in: in, found: found, has: has, ahead: time.Until(dl)})
	}
	opt := connectkit.HandlerOption()
	mux := http.NewServeMux()
	mux.Handle("/pkg.Store/Watch", connect.NewServerStreamHandler("/pkg.Store/Watch",
		func(ctx context.Context, _ *connect.Request[msg], s *connect.ServerStream[msg]) error {
			note(&streamSaw, ctx)
			return s.Send(wrapperspb.String("tick"))
		}, opt))
	mux.Handle("/pkg.Store/Get", connect.NewUnaryHandler("/pkg.Store/Get",
		func(ctx context.Context, _ *connect.Request[msg]) (*connect.Response[msg], error) {
			note(&unarySaw, ctx)
			return connect.NewResponse(wrapperspb.String("ok")), nil
		}, opt))
	srv := httptest.NewServer(deadlinekit.NewHandler(mux, deadlinekit.WithPropagate(
		propagate.WithStreamingHTTP(propagate.StreamingRoutes("/pkg.Store/")))))
	defer srv.Close()

	st, err := connect.NewClient[msg, msg](srv.Client(), srv.URL+"/pkg.Store/Watch").
		CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("a")))
	if err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if got := streamSaw.Load(); got == nil || got.has {
		t.Errorf("a connect stream without a deadline: %+v; want no deadline", got)
	}

	// A unary call with every claim of a stream and years of budget, written by hand.
	req, _ := http.NewRequest("POST", srv.URL+"/pkg.Store/Get", strings.NewReader(`"a"`))
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "text/event-stream",
		"Upgrade": "websocket", "Connection": "Upgrade", "Grpc-Timeout": "99999999H"} {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("unary call: status %d; want 200", resp.StatusCode)
	}
	got := unarySaw.Load()
	if want := (propagate.Inbound{Budget: propagate.DefaultMaxTimeout, Source: propagate.SourceGRPCTimeout, Clamped: true}); got == nil || got.in != want || !got.has || got.ahead > want.Budget {
		t.Errorf("a unary connect call asking for years: %+v; want %+v and a deadline no later", got, want)
	}
	if _, err := connect.NewClient[msg, msg](srv.Client(), srv.URL+"/pkg.Store/Get").
		CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("a"))); err != nil {
		t.Fatal(err)
	}
	if got, want := unarySaw.Load(), (propagate.Inbound{Budget: deadline.DefaultBudget, Source: propagate.SourceDefault}); got.in != want || !got.has {
		t.Errorf("a unary connect call without a deadline: %+v; want %+v", got, want)
	}
}
