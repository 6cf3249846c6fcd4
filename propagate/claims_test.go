package propagate_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit"
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
