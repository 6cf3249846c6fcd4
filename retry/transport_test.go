package retry_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/retry"
)

// fast keeps loopback tests quick: 1–2 ms waits.
var fast = retry.WithBackoff(retry.Backoff{Base: time.Millisecond, Max: 2 * time.Millisecond, Jitter: 0.2})

// idem declares the gRPC methods of these tests idempotent, so that an UNAVAILABLE
// their server answered may be retried.
var idem = retry.WithIdempotentMethods("/svc/Get", "/grpc.testing.TestService/UnaryCall")

// newClient returns an http.Client over a fresh transport (closed at the end of the
// test, so that goleak sees no idle connection).
func newClient(t *testing.T, opts ...retry.Option) *http.Client {
	t.Helper()
	base := &http.Transport{MaxIdleConnsPerHost: 16}
	c := &http.Client{Transport: retry.NewTransport(base, opts...)}
	t.Cleanup(c.CloseIdleConnections) // reaches base through the retry layer
	return c
}

func TestLoopbackConnectionRefused(t *testing.T) {
	addr := testkit.ClosedAddr(t)
	for _, method := range []string{"GET", "POST"} {
		var attempts atomic.Int32
		c := newClient(t, fast, retry.WithBudget(nil), retry.WithObserver(func(_ context.Context, e retry.Event) { attempts.Add(1) }))
		req, _ := http.NewRequest(method, "http://"+addr+"/", strings.NewReader("body"))
		_, err := c.Do(req)
		if err == nil {
			t.Fatalf("%s to a closed port succeeded", method)
		}
		if attempts.Load() != 3 {
			t.Fatalf("%s after connection refused: %d attempts; want 3 (never sent, any method)", method, attempts.Load())
		}
	}
}

// A server that answers 503 a number of times, then 200, recording what it got.
type flaky struct {
	mu       sync.Mutex
	failures int
	hits     int
	keys     []string
	prev     []string
	bodies   []string
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.hits++
	n := f.hits
	f.keys = append(f.keys, r.Header.Get("Idempotency-Key"))
	f.prev = append(f.prev, r.Header.Get("grpc-previous-rpc-attempts"))
	f.bodies = append(f.bodies, string(b))
	f.mu.Unlock()
	if n <= f.failures {
		http.Error(w, strings.Repeat("overloaded ", 100), http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, "ok")
}

func TestLoopback503(t *testing.T) {
	cases := []struct {
		method string
		keys   bool
		hits   int
		code   int
	}{
		{"GET", false, 3, 200},
		{"DELETE", false, 3, 200},
		{"POST", false, 1, 503},
		{"POST", true, 3, 200},
	}
	for _, c := range cases {
		f := &flaky{failures: 2}
		srv := httptest.NewServer(f)
		opts := []retry.Option{fast, retry.WithBudget(nil)}
		if c.keys {
			opts = append(opts, retry.WithIdempotencyKeys(nil))
		}
		client := newClient(t, opts...)
		req, _ := http.NewRequest(c.method, srv.URL, strings.NewReader("payload"))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		srv.Close()
		if resp.StatusCode != c.code || f.hits != c.hits {
			t.Errorf("%s keys=%v: status %d after %d hits; want %d after %d", c.method, c.keys, resp.StatusCode, f.hits, c.code, c.hits)
		}
		for i := range f.hits {
			if f.bodies[i] != "payload" {
				t.Errorf("%s: attempt %d body %q", c.method, i+1, f.bodies[i])
			}
			if f.keys[i] != f.keys[0] {
				t.Errorf("%s: attempt %d key %q != %q", c.method, i+1, f.keys[i], f.keys[0])
			}
		}
		if c.keys && f.keys[0] == "" {
			t.Errorf("POST with WithIdempotencyKeys sent no key")
		}
		if c.hits == 3 && (f.prev[0] != "" || f.prev[1] != "1" || f.prev[2] != "2") {
			t.Errorf("%s: grpc-previous-rpc-attempts %q", c.method, f.prev)
		}
	}
}

// Read timeout and reset after the request was sent: retried for GET, not for POST
// without a key.
func TestLoopbackAfterSending(t *testing.T) {
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	mux.HandleFunc("/reset", func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.SetLinger(0) // RST
			}
			conn.Close()
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer close(release)

	// Attempts are counted on the client: an attempt whose timeout fires may not have
	// reached the handler yet.
	var attempts atomic.Int32
	client := newClient(t, fast, retry.WithBudget(nil), retry.WithAttemptTimeout(30*time.Millisecond),
		retry.WithObserver(func(context.Context, retry.Event) { attempts.Add(1) }))
	cases := []struct {
		method, path, key string
		want              int32
	}{
		{"GET", "/hang", "", 3},
		{"POST", "/hang", "", 1},
		{"POST", "/hang", "k1", 3},
		{"GET", "/reset", "", 3},
		{"POST", "/reset", "", 1},
		{"POST", "/reset", "k2", 3},
	}
	for _, c := range cases {
		attempts.Store(0)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, c.method, srv.URL+c.path, strings.NewReader("x"))
		if c.key != "" {
			req.Header.Set("Idempotency-Key", c.key)
		}
		resp, err := client.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			t.Fatalf("%s %s succeeded", c.method, c.path)
		}
		if got := attempts.Load(); got != c.want {
			t.Errorf("%s %s key=%q: %d attempts; want %d (err %v)", c.method, c.path, c.key, got, c.want, err)
		}
	}
}

// The bodies of the failed attempts are drained and closed, so the connection is
// reused: three attempts over one connection.
func TestLoopbackConnectionReused(t *testing.T) {
	f := &flaky{failures: 2}
	srv := httptest.NewUnstartedServer(f)
	var conns atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	client := newClient(t, fast, retry.WithBudget(nil))
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if f.hits != 3 || conns.Load() != 1 {
		t.Fatalf("%d hits over %d connections; want 3 over 1", f.hits, conns.Load())
	}
}

// A POST without an Idempotency-Key whose header and part of its body reached the
// server before the connection was cut may have started the handler: it is sent
// once, as net/http alone sends it. A GET and a keyed POST are retried.
func TestLoopbackCutWhileSendingBody(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 8<<20) // far more than the socket buffers hold
	cases := []struct {
		method, key string
		body        []byte
		want        int32
	}{
		{"POST", "", body, 1},
		{"POST", "k1", body, 3},
		{"PUT", "", body, 3},
		{"GET", "", nil, 3},
	}
	for _, c := range cases {
		s := testkit.NewCutServer(t)
		client := newClient(t, fast, retry.WithBudget(nil))
		var rd io.Reader = http.NoBody
		if c.body != nil {
			rd = bytes.NewReader(c.body)
		}
		req, _ := http.NewRequest(c.method, s.URL(), rd)
		if c.key != "" {
			req.Header.Set("Idempotency-Key", c.key)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("%s key=%q to a server that cuts the connection succeeded", c.method, c.key)
		}
		if got := s.Arrivals.Load(); got != c.want {
			t.Errorf("%s key=%q: the server got the request %d times; want %d (err %v)", c.method, c.key, got, c.want, err)
		}
	}
}
