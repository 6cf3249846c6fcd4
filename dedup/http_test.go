package dedup_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit/dedup"
)

// charges is a handler that counts its executions and answers 201 with the count.
type charges struct {
	n    atomic.Int64
	gate chan struct{} // when set, each execution waits for it after it started
	ran  chan struct{} // when set, receives once per execution, when it starts
}

func (c *charges) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.n.Add(1)
	if c.ran != nil {
		c.ran <- struct{}{}
	}
	if c.gate != nil {
		<-c.gate
	}
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("X-Charge", strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "charge %d for %s", n, body)
}

// withTimeout puts a deadline of the X-Test-Timeout header's duration on the
// request's context, as package propagate would.
func withTimeout(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get("X-Test-Timeout"); v != "" {
			d, _ := time.ParseDuration(v)
			ctx, cancel := context.WithTimeout(r.Context(), d)
			defer cancel()
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	})
}

func serve(t *testing.T, h http.Handler, store dedup.Store, opts ...dedup.Option) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(withTimeout(dedup.NewMiddleware(store, opts...)(h)))
	t.Cleanup(srv.Close)
	return srv
}

type answer struct {
	status   int
	body     string
	header   http.Header
	replayed bool
}

func post(t *testing.T, url, key, body string, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header, resp.Header.Get("Idempotent-Replayed") == "true"}
}

func TestSequentialRepeatsRunOnce(t *testing.T) {
	h := &charges{}
	srv := serve(t, h, dedup.NewMemoryStore())
	first := post(t, srv.URL+"/charges?x=1", "k1", "100")
	if first.status != 201 || first.replayed || first.body != "charge 1 for 100" {
		t.Fatalf("first: %+v", first)
	}
	for range 3 {
		a := post(t, srv.URL+"/charges?x=1", "k1", "100")
		if a.status != 201 || !a.replayed || a.body != first.body || a.header.Get("X-Charge") != "1" {
			t.Fatalf("repeat: %+v", a)
		}
	}
	if n := h.n.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	// No key, or another key: it runs.
	post(t, srv.URL+"/charges?x=1", "", "100")
	post(t, srv.URL+"/charges?x=1", "k2", "100")
	if n := h.n.Load(); n != 3 {
		t.Fatalf("handler ran %d times, want 3", n)
	}
}

func TestConcurrentRepeatsRunOnce(t *testing.T) {
	h := &charges{gate: make(chan struct{}), ran: make(chan struct{}, 64)}
	srv := serve(t, h, dedup.NewMemoryStore())
	const n = 50
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = post(t, srv.URL+"/charges", `"same"`, "100") })
	}
	<-h.ran // the first runs; the others wait for it or arrive after it
	close(h.gate)
	wg.Wait()
	if got := h.n.Load(); got != 1 {
		t.Fatalf("handler ran %d times for %d concurrent repeats, want 1", got, n)
	}
	replayed := 0
	for _, a := range answers {
		if a.status != 201 || a.body != "charge 1 for 100" {
			t.Fatalf("answer %+v", a)
		}
		if a.replayed {
			replayed++
		}
	}
	if replayed != n-1 {
		t.Fatalf("%d answers replayed, want %d", replayed, n-1)
	}
}

func TestMismatch(t *testing.T) {
	h := &charges{}
	srv := serve(t, h, dedup.NewMemoryStore())
	post(t, srv.URL+"/charges?a=1", "k", "100")
	for _, tc := range []struct{ name, path, body string }{
		{"body", "/charges?a=1", "999"},
		{"path", "/refunds?a=1", "100"},
		{"query", "/charges?a=2", "100"},
	} {
		a := post(t, srv.URL+tc.path, "k", tc.body)
		if a.status != http.StatusUnprocessableEntity || a.replayed {
			t.Errorf("%s differs: %+v, want 422", tc.name, a)
		}
	}
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/charges?a=1", strings.NewReader("100"))
	req.Header.Set("Idempotency-Key", "k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("method differs: %d, want 422", resp.StatusCode)
	}
	if n := h.n.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestMismatchWhileFirstRuns(t *testing.T) {
	h := &charges{gate: make(chan struct{}), ran: make(chan struct{}, 1)}
	srv := serve(t, h, dedup.NewMemoryStore())
	done := make(chan answer)
	go func() { done <- post(t, srv.URL+"/c", "k", "100") }()
	<-h.ran
	if a := post(t, srv.URL+"/c", "k", "200"); a.status != http.StatusUnprocessableEntity {
		t.Errorf("another body while the first runs: %+v, want 422", a)
	}
	close(h.gate)
	<-done
}

func TestScopes(t *testing.T) {
	h := &charges{}
	tenant := func(ctx context.Context) string { return ctx.Value(tenantKey{}).(string) }
	srv := httptest.NewServer(withTenant(dedup.NewMiddleware(dedup.NewMemoryStore(), dedup.WithScope(tenant))(h)))
	defer srv.Close()
	a := post(t, srv.URL+"/c", "k", "100", "X-Tenant", "A")
	b := post(t, srv.URL+"/c", "k", "100", "X-Tenant", "B")
	if b.replayed || b.body == a.body || b.body != "charge 2 for 100" {
		t.Fatalf("tenant B got %+v after tenant A's %+v", b, a)
	}
	// Scopes that would collide if joined naively.
	c := post(t, srv.URL+"/c", "b:k", "100", "X-Tenant", "a")
	d := post(t, srv.URL+"/c", "k", "100", "X-Tenant", "a:b")
	if c.replayed || d.replayed {
		t.Fatalf("scope and key joined ambiguously: %+v %+v", c, d)
	}
	if r := post(t, srv.URL+"/c", "k", "100", "X-Tenant", "A"); !r.replayed || r.body != a.body {
		t.Fatalf("tenant A's repeat: %+v", r)
	}
}

type tenantKey struct{}

func withTenant(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, r.Header.Get("X-Tenant"))))
	})
}

func TestErrorAnswersAreReplayed(t *testing.T) {
	for _, code := range []int{400, 402, 409, 500, 503} {
		var n atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			http.Error(w, "declined "+strconv.Itoa(code), code)
		})
		srv := serve(t, h, dedup.NewMemoryStore())
		a := post(t, srv.URL, "k", "")
		b := post(t, srv.URL, "k", "")
		if a.status != code || b.status != code || !b.replayed || b.body != a.body || n.Load() != 1 {
			t.Errorf("%d: first %+v, repeat %+v, ran %d", code, a, b, n.Load())
		}
	}
}

func TestReleased(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler func(n int64, w http.ResponseWriter, r *http.Request) (answered bool)
		timeout string
	}{
		{"panic", func(n int64, w http.ResponseWriter, r *http.Request) bool {
			panic(http.ErrAbortHandler)
		}, ""},
		{"Forget", func(n int64, w http.ResponseWriter, r *http.Request) bool {
			dedup.Forget(r.Context())
			http.Error(w, "card network down", http.StatusBadGateway)
			return true
		}, ""},
		{"deadline", func(n int64, w http.ResponseWriter, r *http.Request) bool {
			<-r.Context().Done() // nothing written
			return true
		}, "30ms"},
		{"504", func(n int64, w http.ResponseWriter, r *http.Request) bool {
			http.Error(w, "timed out", http.StatusGatewayTimeout)
			return true
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) == 1 && tc.handler(n.Load(), w, r) {
					return
				}
				w.WriteHeader(http.StatusCreated)
			})
			srv := serve(t, h, dedup.NewMemoryStore())
			req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
			req.Header.Set("Idempotency-Key", "k")
			if tc.timeout != "" {
				req.Header.Set("X-Test-Timeout", tc.timeout)
			}
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
			if a := post(t, srv.URL, "k", ""); a.status != http.StatusCreated || a.replayed {
				t.Fatalf("repeat after the first was released: %+v", a)
			}
			if n.Load() != 2 {
				t.Fatalf("handler ran %d times, want 2", n.Load())
			}
			if a := post(t, srv.URL, "k", ""); !a.replayed {
				t.Fatalf("third: %+v, want the second's answer replayed", a)
			}
		})
	}
}

func TestCallerCancelReleases(t *testing.T) {
	var n atomic.Int64
	started := make(chan struct{}, 1)
	returned := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			started <- struct{}{}
			<-r.Context().Done()
			returned <- struct{}{}
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	srv := serve(t, h, dedup.NewMemoryStore())
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
	req.Header.Set("Idempotency-Key", "k")
	go func() { <-started; cancel() }()
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	<-returned
	// The release happens after the handler returned; a repeat that comes before it
	// waits for it.
	if a := post(t, srv.URL, "k", ""); a.status != http.StatusCreated || a.replayed {
		t.Fatalf("repeat: %+v", a)
	}
}

func TestConflictBeyondBudget(t *testing.T) {
	h := &charges{gate: make(chan struct{}), ran: make(chan struct{}, 1)}
	srv := serve(t, h, dedup.NewMemoryStore())
	done := make(chan answer)
	go func() { done <- post(t, srv.URL, "k", "1", "X-Test-Timeout", "20s") }()
	<-h.ran
	a := post(t, srv.URL, "k", "1", "X-Test-Timeout", "60ms")
	if a.status != http.StatusConflict {
		t.Fatalf("repeat beyond its budget: %+v, want 409", a)
	}
	ms, err := strconv.Atoi(a.header.Get("Grpc-Retry-Pushback-Ms"))
	if err != nil || ms <= 0 || ms > 21000 {
		t.Errorf("pushback %q, want the first's time left (≤ 21 s)", a.header.Get("Grpc-Retry-Pushback-Ms"))
	}
	if ra, _ := strconv.Atoi(a.header.Get("Retry-After")); ra < 1 || ra > 21 {
		t.Errorf("Retry-After %q", a.header.Get("Retry-After"))
	}
	close(h.gate)
	if f := <-done; f.status != 201 {
		t.Fatalf("first: %+v", f)
	}
	if r := post(t, srv.URL, "k", "1"); !r.replayed {
		t.Fatalf("coming back after the first: %+v", r)
	}
}

func TestMalformedKey(t *testing.T) {
	h := &charges{}
	srv := serve(t, h, dedup.NewMemoryStore())
	for _, k := range []string{"", strings.Repeat("x", 256), "a\x01b", "clé", `"a`, `a"b`, "a,b"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		req.Header["Idempotency-Key"] = []string{k}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue // net/http refuses to send some of these itself
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), "Idempotency-Key") {
			t.Errorf("key %q: %d %q, want 400 naming the header", k, resp.StatusCode, b)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
	req.Header["Idempotency-Key"] = []string{"a", "b"}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("two values: %d, want 400", resp.StatusCode)
	}
	if h.n.Load() != 0 {
		t.Fatalf("handler ran %d times for malformed keys", h.n.Load())
	}
}

func TestMaxResponseSize(t *testing.T) {
	var n atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Write([]byte(strings.Repeat("x", 100)))
	})
	srv := serve(t, h, dedup.NewMemoryStore(), dedup.WithMaxResponseSize(64))
	if a := post(t, srv.URL, "k", ""); a.status != 200 || len(a.body) != 100 {
		t.Fatalf("first: %d, %d bytes", a.status, len(a.body))
	}
	// The refusal is not the stored answer: it is not marked as one.
	a := post(t, srv.URL, "k", "")
	if a.status != http.StatusGone || a.replayed || !strings.Contains(a.body, "status 200") || !strings.Contains(a.body, "size limit") {
		t.Fatalf("repeat of an answer too large to keep: %+v", a)
	}
	if n.Load() != 1 {
		t.Fatalf("ran %d times", n.Load())
	}
}

// TestMaxResponseSizeCountsHeaders: the limit bounds what is stored, headers and
// trailers included, not the body alone: a small body under a large header is not
// kept either.
func TestMaxResponseSizeCountsHeaders(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(h http.Header)
	}{
		{"header", func(h http.Header) { h.Set("X-Big", strings.Repeat("h", 4096)) }},
		{"trailer", func(h http.Header) { h.Set(http.TrailerPrefix+"X-Big", strings.Repeat("t", 4096)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				if tc.name == "header" {
					tc.set(w.Header())
				}
				w.Write([]byte("ok"))
				if tc.name == "trailer" {
					tc.set(w.Header())
				}
			})
			srv := serve(t, h, dedup.NewMemoryStore(), dedup.WithMaxResponseSize(1024))
			if a := post(t, srv.URL, "k", ""); a.status != 200 || a.body != "ok" {
				t.Fatalf("first: %+v", a)
			}
			if a := post(t, srv.URL, "k", ""); a.status != http.StatusGone || a.replayed {
				t.Fatalf("repeat of an answer whose %s is above the limit: %d (replayed %v), want 410", tc.name, a.status, a.replayed)
			}
			if n.Load() != 1 {
				t.Fatalf("ran %d times", n.Load())
			}
		})
	}
}

func TestMaxRequestSize(t *testing.T) {
	h := &charges{}
	srv := serve(t, h, dedup.NewMemoryStore(), dedup.WithMaxRequestSize(10))
	if a := post(t, srv.URL, "k", strings.Repeat("x", 11)); a.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("%+v, want 413", a)
	}
	if a := post(t, srv.URL, "k", strings.Repeat("x", 10)); a.status != 201 {
		t.Fatalf("%+v, want 201", a)
	}
	if a := post(t, srv.URL, "", strings.Repeat("x", 11)); a.status != 201 {
		t.Fatalf("no key: %+v, want 201 (not read)", a)
	}
}
