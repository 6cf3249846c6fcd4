package deadlinekit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// edgeAnswer is one answer of the edge, as an end user reads it.
type edgeAnswer struct {
	status int
	body   string
	header http.Header
}

// internalHeaders are what an edge never sends.
var internalHeaders = []string{"Grpc-Retry-Pushback-Ms", "Deadlinekit-Relayed", "Deadlinekit-Unprocessed",
	"Deadlinekit-Hedged-Above", "Grpc-Previous-Rpc-Attempts", "Deadlinekit-Criticality"}

// edgeHandler is a payments edge: a handler that charges, declines in its own words,
// or relays a downstream's failure with WriteHTTPError.
func edgeHandler(runs *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		body, _ := io.ReadAll(r.Body)
		switch string(body) {
		case "decline":
			http.Error(w, "card declined", http.StatusPaymentRequired)
		case "relay":
			// A downstream's guard refused, and said so in its own words.
			deadlinekit.WriteHTTPError(w, deadlinekit.FromHTTP(&http.Response{StatusCode: 504, Body: io.NopCloser(strings.NewReader("shortcircuit: 979µs left, floor 21.5ms")),
				Header: http.Header{"Grpc-Retry-Pushback-Ms": {"-1"}, "Deadlinekit-Unprocessed": {"1"}}}, nil))
		case "relay-open":
			deadlinekit.WriteHTTPError(w, deadlinekit.FromHTTP(&http.Response{StatusCode: 503, Body: io.NopCloser(strings.NewReader("10.0.0.7:8080: circuit open")),
				Header: http.Header{"Retry-After": {"3"}}}, nil))
		default:
			w.Header().Set("Deadlinekit-Hedged-Above", "1") // a layer's signal that leaked into the answer
			fmt.Fprint(w, "charged")
		}
	})
}

func ask(t testing.TB, h http.Handler, header http.Header, body string) edgeAnswer {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(body))
	for k, vs := range header {
		req.Header[k] = vs
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return edgeAnswer{w.Code, strings.TrimSpace(w.Body.String()), w.Result().Header}
}

// The edge's table of hostile inputs: every refusal and relayed failure in public
// words with its status and Retry-After, never an internal header, the caller's own
// faults named, the handler's own words kept; and without WithEdge the same
// requests still get the internal words (the stack's other servers need them).
func TestEdgeAnswers(t *testing.T) {
	for _, c := range []struct {
		name       string
		header     http.Header
		body       string
		status     int
		text       string
		retryAfter string
		runs       int32
		internal   string // what a server without WithEdge says
	}{
		{"a charge", nil, "100", 200, "charged", "", 1, ""},
		{"the handler's own decline", nil, "decline", 402, "card declined", "", 1, "card declined"},
		{"too little time for the guard", http.Header{"Grpc-Timeout": {"20m"}}, "100", 504, "not enough time left to serve the request", "", 0, "shortcircuit: "},
		{"no time at all", http.Header{"Grpc-Timeout": {"0n"}}, "100", 504, "not enough time left to serve the request", "", 0, "propagate: request arrived with no time left"},
		{"a malformed deadline", http.Header{"Grpc-Timeout": {"soon"}}, "100", 400, "malformed Grpc-Timeout header: ", "", 0, `propagate: malformed Grpc-Timeout header "soon"`},
		{"a malformed Connect deadline", http.Header{"Connect-Timeout-Ms": {"-5"}}, "100", 400, "malformed Connect-Timeout-Ms header: ", "", 0, "propagate: malformed Connect-Timeout-Ms"},
		{"two deadlines", http.Header{"Grpc-Timeout": {"1S", "9H"}}, "100", 400, "malformed Grpc-Timeout header: repeated 2 times", "", 0, "propagate: malformed Grpc-Timeout"},
		{"two keys", http.Header{"Idempotency-Key": {"order-1", "order-2"}}, "100", 400, "malformed Idempotency-Key: 2 values, want one", "", 0, ""},
		{"a key not ASCII", http.Header{"Idempotency-Key": {"clé"}}, "100", 400, "malformed Idempotency-Key: character 'é' (U+00E9) at position 2 is not visible ASCII", "", 0, ""},
		{"a key too long", http.Header{"Idempotency-Key": {strings.Repeat("k", 256)}}, "100", 400, "malformed Idempotency-Key: longer than 255 characters", "", 0, ""},
		{"an empty key", http.Header{"Idempotency-Key": {""}}, "100", 400, "malformed Idempotency-Key: empty", "", 0, ""},
		{"a relayed guard refusal", nil, "relay", 504, "not enough time left to serve the request", "", 1, "shortcircuit: 979µs left"},
		{"a relayed open circuit", nil, "relay-open", 503, "overloaded, retry in 3 s", "3", 1, "10.0.0.7:8080"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var runs atomic.Int32
			h := deadlinekit.NewHandler(edgeHandler(&runs), deadlinekit.WithEdge(), deadlinekit.WithFloor(50*time.Millisecond))
			a := ask(t, h, c.header, c.body)
			if a.status != c.status || !strings.HasPrefix(a.body, c.text) || a.header.Get("Retry-After") != c.retryAfter || runs.Load() != c.runs {
				t.Errorf("edge answered %d %q Retry-After %q, handler ran %d times; want %d %q… %q, %d",
					a.status, a.body, a.header.Get("Retry-After"), runs.Load(), c.status, c.text, c.retryAfter, c.runs)
			}
			for _, k := range internalHeaders {
				if v, ok := a.header[k]; ok {
					t.Errorf("the edge sent %s: %q", k, v)
				}
			}
			for _, word := range []string{"propagate", "shortcircuit", "dedup:", "soon", "10.0.0.7", "µs"} {
				if strings.Contains(a.body, word) {
					t.Errorf("the edge said %q", a.body)
				}
			}
			if c.internal == "" {
				return
			}
			inner := ask(t, deadlinekit.NewHandler(edgeHandler(new(atomic.Int32)), deadlinekit.WithFloor(50*time.Millisecond)), c.header, c.body)
			if inner.status != c.status || !strings.Contains(inner.body, c.internal) {
				t.Errorf("a server without WithEdge answered %d %q; want %d with %q", inner.status, inner.body, c.status, c.internal)
			}
		})
	}
}

// Dedup at the edge: its refusals in public words (a reused key 422, a key still
// running 409 with Retry-After), a replay of the handler's own answer verbatim with
// Idempotent-Replayed.
func TestEdgeDedup(t *testing.T) {
	var runs atomic.Int32
	release := make(chan struct{})
	h := deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		if b, _ := io.ReadAll(r.Body); string(b) == "slow" {
			<-release
		}
		http.Error(w, "card declined", http.StatusPaymentRequired)
	}), deadlinekit.WithEdge(), deadlinekit.WithDedup(dedup.NewMemoryStore()))
	key := func(k string) http.Header { return http.Header{"Idempotency-Key": {k}, "Grpc-Timeout": {"300m"}} }
	if a := ask(t, h, key("a"), "100"); a.status != 402 || a.body != "card declined" {
		t.Fatalf("first: %d %q", a.status, a.body)
	}
	if a := ask(t, h, key("a"), "100"); a.status != 402 || a.body != "card declined" || a.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %q replayed %q", a.status, a.body, a.header.Get("Idempotent-Replayed"))
	}
	if a := ask(t, h, key("a"), "250"); a.status != 422 || a.body != "this Idempotency-Key was used for a different request" {
		t.Fatalf("the key for another amount: %d %q", a.status, a.body)
	}
	done := make(chan edgeAnswer)
	go func() { done <- ask(t, h, key("b"), "slow") }()
	for runs.Load() != 2 {
		time.Sleep(time.Millisecond)
	}
	a := ask(t, h, http.Header{"Idempotency-Key": {"b"}, "Grpc-Timeout": {"100m"}}, "slow")
	close(release)
	<-done
	if a.status != 409 || !strings.HasPrefix(a.body, "conflict, retry in ") || a.header.Get("Retry-After") == "" || a.header.Get("Grpc-Retry-Pushback-Ms") != "" {
		t.Fatalf("a repeat while the first runs: %d %q %v", a.status, a.body, a.header)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("the handler ran %d times, want 2", n)
	}
}

// FuzzEdge: whatever keys and deadline headers a caller sends, the edge answers the
// handler's 200 or a 4xx/5xx in its own short words, never runs the handler for a
// request it refused, and never sends an internal header.
func FuzzEdge(f *testing.F) {
	f.Add("order-1", "", "1S")
	f.Add("order-1", "order-2", "")
	f.Add("clé", "", "soon")
	f.Add(`"a\"b"`, "", "99999999H")
	f.Add("", "", "0n")
	var runs atomic.Int32
	h := deadlinekit.NewHandler(edgeHandler(&runs), deadlinekit.WithEdge())
	f.Fuzz(func(t *testing.T, key1, key2, timeout string) {
		header := http.Header{}
		for _, k := range []string{key1, key2} {
			if k != "" {
				header.Add("Idempotency-Key", k)
			}
		}
		if timeout != "" {
			header.Set("Grpc-Timeout", timeout)
		}
		before := runs.Load()
		a := ask(t, h, header, "100")
		ran := runs.Load() != before
		switch {
		case a.status == 200:
			if !ran || a.body != "charged" {
				t.Fatalf("200 %q, ran %v", a.body, ran)
			}
		case a.status >= 400 && a.status < 600:
			if ran {
				t.Fatalf("%d %q after the handler ran", a.status, a.body)
			}
			if len(a.body) > 300 || !utf8.ValidString(a.body) || strings.Contains(a.body, "propagate") || strings.Contains(a.body, "dedup:") || strings.Contains(a.body, "shortcircuit") {
				t.Fatalf("%d %q: not public words", a.status, a.body)
			}
		default:
			t.Fatalf("answered %d %q", a.status, a.body)
		}
		for _, k := range internalHeaders {
			if _, ok := a.header[k]; ok {
				t.Fatalf("sent %s", k)
			}
		}
	})
}

// The edge's guard, full (one slot, no queue): the request beyond it is refused 503
// "overloaded, retry in N s" with Retry-After, and without the guard's internal
// signals (deadlinekit-unprocessed, grpc-retry-pushback-ms).
func TestEdgeQueueFull(t *testing.T) {
	release, running := make(chan struct{}), make(chan struct{})
	h := deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		running <- struct{}{}
		<-release
		fmt.Fprint(w, "charged")
	}), deadlinekit.WithEdge(), deadlinekit.WithShortCircuit(shortcircuit.WithMaxConcurrency(1), shortcircuit.WithQueue(0, shortcircuit.FIFO)))
	done := make(chan edgeAnswer)
	go func() { done <- ask(t, h, nil, "100") }()
	<-running
	a := ask(t, h, nil, "100")
	close(release)
	if first := <-done; first.status != 200 {
		t.Fatalf("the first: %d %q", first.status, first.body)
	}
	if a.status != http.StatusServiceUnavailable || !strings.HasPrefix(a.body, "overloaded, retry in ") || a.header.Get("Retry-After") == "" {
		t.Fatalf("beyond the guard's slot: %d %q Retry-After %q; want 503 \"overloaded, retry in …\"", a.status, a.body, a.header.Get("Retry-After"))
	}
	for _, k := range internalHeaders {
		if _, ok := a.header[k]; ok {
			t.Errorf("the edge sent %s", k)
		}
	}
}

// publicReasons are how every public text starts.
var publicReasons = []string{"request cancelled", "not enough time left to serve the request", "deadline exceeded",
	"downstream unavailable", "overloaded, retry in ", "rate limited", "invalid request", "not found", "conflict",
	"permission denied", "unauthenticated", "the request cannot be served in the current state", "not implemented",
	"internal error", "this Idempotency-Key was used for a different request", "malformed Idempotency-Key: "}

// FuzzEdgeRelay: whatever a downstream answers (status, body, pushback, Retry-After),
// an edge handler that relays it with WriteHTTPError sends the end user a failure
// status, one of the public texts (none repeats the downstream's body, but dedup's
// refusal of the caller's own key), and no internal header.
func FuzzEdgeRelay(f *testing.F) {
	f.Add(504, "shortcircuit: 979µs left, floor 21.5ms", "-1", "")
	f.Add(503, "dial tcp 10.0.0.7:6379: connection refused", "", "3")
	f.Add(400, "idempotency-key: malformed Idempotency-Key: empty", "", "")
	f.Add(422, "dedup: this Idempotency-Key was used for a different request", "", "")
	f.Add(409, "dedup: the first request is still being processed", "1500", "2")
	f.Add(200, "", "x", "Wed, 21 Oct 2015 07:28:00 GMT")
	f.Fuzz(func(t *testing.T, code int, body, pb, retryAfter string) {
		h := deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			resp := &http.Response{StatusCode: code, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body))}
			if pb != "" {
				resp.Header.Set("Grpc-Retry-Pushback-Ms", pb)
			}
			if retryAfter != "" {
				resp.Header.Set("Retry-After", retryAfter)
			}
			err := deadlinekit.FromHTTP(resp, nil)
			if err == nil {
				fmt.Fprint(w, "ok")
				return
			}
			deadlinekit.WriteHTTPError(w, err)
		}), deadlinekit.WithEdge())
		a := ask(t, h, nil, "")
		if a.status == 200 {
			return
		}
		if a.status < 400 || a.status > 599 || len(a.body) > 300 || !utf8.ValidString(a.body) {
			t.Fatalf("answered %d %q", a.status, a.body)
		}
		public := false
		for _, p := range publicReasons {
			public = public || strings.HasPrefix(a.body, p)
		}
		if !public {
			t.Fatalf("the downstream's %d %q reached the end user as %q", code, body, a.body)
		}
		for _, k := range internalHeaders {
			if _, ok := a.header[k]; ok {
				t.Fatalf("sent %s", k)
			}
		}
	})
}
