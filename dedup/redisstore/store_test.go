package redisstore_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/dedup/redisstore"
	"github.com/deadlinekit/deadlinekit/internal/redistest"
)

func TestMain(m *testing.M) {
	// go-redis redials a node that refused a connection from a goroutine of its
	// pool, which sleeps a second between tries and ends once it sees the pool
	// closed: after a killed master, it outlives the client by up to that second.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// roomy is the bound of a store in a test that is not about the bound (WithTimeout):
// on a loaded machine a call may take longer than the default's 250 ms, and the
// store would then answer 503 for a while, as it should.
var roomy = redisstore.WithTimeout(10 * time.Second)

// counter counts the commands (round trips) a client sends.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

func client(t *testing.T, srv *redistest.Server) (*redis.Client, *counter) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	c := &counter{}
	rdb.AddHook(c)
	t.Cleanup(func() { rdb.Close() })
	return rdb, c
}

func TestStoreContract(t *testing.T) {
	srv := redistest.Start(t)
	rdb, _ := client(t, srv)
	ctx := context.Background()
	s := redisstore.New(rdb, redisstore.WithPrefix("t:"))
	ok, _, err := s.Acquire(ctx, "k", dedup.Lease{Token: "a", Fingerprint: "fp1", TTL: time.Minute})
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	if n, _ := rdb.Exists(ctx, "t:{k}").Result(); n != 1 {
		t.Fatal("no record under the prefix and hash tag")
	}
	ok, e, err := s.Acquire(ctx, "k", dedup.Lease{Token: "b", Fingerprint: "fp2", TTL: time.Minute})
	if err != nil || ok || e.State != dedup.Running || e.Fingerprint != "fp1" || e.Left <= 0 || e.Left > time.Minute {
		t.Fatalf("second acquire: %v %+v %v", ok, e, err)
	}
	if err := s.Complete(ctx, "k", "b", []byte("x"), time.Hour); err != dedup.ErrLeaseLost {
		t.Fatalf("complete with another token: %v", err)
	}
	if err := s.Release(ctx, "k", "b"); err != dedup.ErrLeaseLost {
		t.Fatalf("release with another token: %v", err)
	}
	if err := s.Complete(ctx, "k", "a", []byte("answer\nwith newline"), time.Hour); err != nil {
		t.Fatal(err)
	}
	e, err = s.Get(ctx, "k")
	if err != nil || e.State != dedup.Done || e.Fingerprint != "fp1" || string(e.Answer) != "answer\nwith newline" || e.Left < 59*time.Minute {
		t.Fatalf("get: %+v %v", e, err)
	}
	if err := s.Release(ctx, "k", "a"); err != dedup.ErrLeaseLost {
		t.Fatalf("release of a completed record: %v", err)
	}
	s.Acquire(ctx, "r", dedup.Lease{Token: "a", Fingerprint: "f", TTL: time.Minute})
	if err := s.Release(ctx, "r", "a"); err != nil {
		t.Fatal(err)
	}
	if e, _ := s.Get(ctx, "r"); e.State != dedup.Absent {
		t.Fatalf("released: %+v", e)
	}
	// A lease ends on its own.
	s.Acquire(ctx, "x", dedup.Lease{Token: "a", Fingerprint: "f", TTL: 20 * time.Millisecond})
	if e, err := s.Wait(ctx, "x"); err != nil || e.State != dedup.Absent {
		t.Fatalf("wait for an ending lease: %+v %v", e, err)
	}
}

func charge(n *atomic.Int64, stuck <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1)
		if stuck != nil && i == 1 {
			<-stuck
			return
		}
		body, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge %d for %s", i, body)
	})
}

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

type answer struct {
	status   int
	body     string
	header   http.Header
	replayed bool
}

func post(t *testing.T, url, key, timeout string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("100"))
	req.Header.Set("Idempotency-Key", key)
	if timeout != "" {
		req.Header.Set("X-Test-Timeout", timeout)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header, resp.Header.Get("Idempotent-Replayed") == "true"}
}

func TestRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	rdb, c := client(t, srv)
	var n atomic.Int64
	h := dedup.NewMiddleware(redisstore.New(rdb, roomy))(charge(&n, nil))
	// Load the scripts once (EVALSHA answers NOSCRIPT the first time).
	h.ServeHTTP(httptest.NewRecorder(), keyed("warm"))
	c.n.Store(0)
	h.ServeHTTP(httptest.NewRecorder(), keyed("k"))
	if got := c.n.Load(); got != 2 {
		t.Errorf("first request: %d round trips, want 2", got)
	}
	c.n.Store(0)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, keyed("k"))
	if got := c.n.Load(); got != 1 || rec.Header().Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: %d round trips (replayed %q), want 1", got, rec.Header().Get("Idempotent-Replayed"))
	}
}

func keyed(k string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader("100"))
	r.Header.Set("Idempotency-Key", k)
	return r
}

func TestConcurrentRepeatsOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	rdb, _ := client(t, srv)
	var n atomic.Int64
	web := httptest.NewServer(dedup.NewMiddleware(redisstore.New(rdb, roomy))(charge(&n, nil)))
	defer web.Close()
	var wg sync.WaitGroup
	answers := make([]answer, 50)
	for i := range answers {
		wg.Go(func() { answers[i] = post(t, web.URL, "k", "") })
	}
	wg.Wait()
	for _, a := range answers {
		if a.status != 201 || a.body != "charge 1 for 100" {
			t.Fatalf("answer %+v", a)
		}
	}
	if n.Load() != 1 {
		t.Fatalf("ran %d times, want 1", n.Load())
	}
}

// TestTwoReplicas: two servers on one Redis; the first's handler never returns (a
// dead replica). A repeat before the first's lease ends waits and gets 409; one
// after it runs on the second replica.
func TestTwoReplicas(t *testing.T) {
	srv := redistest.Start(t)
	rdbA, _ := client(t, srv)
	rdbB, _ := client(t, srv)
	var nA, nB atomic.Int64
	stuck := make(chan struct{})
	opts := []dedup.Option{dedup.WithLeaseMargin(100 * time.Millisecond)}
	a := httptest.NewServer(withTimeout(dedup.NewMiddleware(redisstore.New(rdbA, roomy), opts...)(charge(&nA, stuck))))
	defer a.Close()
	b := httptest.NewServer(withTimeout(dedup.NewMiddleware(redisstore.New(rdbB, roomy), opts...)(charge(&nB, nil))))
	defer b.Close()
	defer close(stuck) // before the servers close: a.Close waits for its handler
	go func() {
		req, _ := http.NewRequest(http.MethodPost, a.URL, strings.NewReader("100"))
		req.Header.Set("Idempotency-Key", "k")
		req.Header.Set("X-Test-Timeout", "1s")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	for nA.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	r := post(t, b.URL, "k", "200ms")
	if r.status != http.StatusConflict || r.header.Get("Retry-After") == "" || r.header.Get("Grpc-Retry-Pushback-Ms") == "" {
		t.Fatalf("repeat during the first's lease: %+v, want 409 with the time to come back", r)
	}
	if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Errorf("repeat answered after %v, want it to wait its budget less the floor (180ms)", waited)
	}
	// Come back after the first's lease (1s + 100ms from its start).
	for time.Since(start) < 1200*time.Millisecond {
		time.Sleep(10 * time.Millisecond)
	}
	if r := post(t, b.URL, "k", "1s"); r.status != 201 || r.replayed || nB.Load() != 1 {
		t.Fatalf("repeat after the first's lease: %+v, replica B ran %d", r, nB.Load())
	}
	if r := post(t, a.URL, "k", "1s"); !r.replayed || nA.Load() != 1 {
		t.Fatalf("a further repeat on replica A: %+v, A ran %d", r, nA.Load())
	}
}

func TestRedisStoppedAndRestarted(t *testing.T) {
	srv := redistest.Start(t)
	rdb, _ := client(t, srv)
	var n atomic.Int64
	web := httptest.NewServer(withTimeout(dedup.NewMiddleware(redisstore.New(rdb))(charge(&n, nil))))
	defer web.Close()
	open := httptest.NewServer(withTimeout(dedup.NewMiddleware(redisstore.New(rdb), dedup.WithRunWithoutStore())(charge(&n, nil))))
	defer open.Close()
	if r := post(t, web.URL, "before", "1s"); r.status != 201 {
		t.Fatalf("before: %+v", r)
	}
	srv.Stop()
	r := post(t, web.URL, "during", "1s")
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" || n.Load() != 1 {
		t.Fatalf("Redis down: %+v (ran %d), want 503 + Retry-After and no execution", r, n.Load())
	}
	if r := post(t, open.URL, "during", "1s"); r.status != 201 || n.Load() != 2 {
		t.Fatalf("Redis down, WithRunWithoutStore: %+v", r)
	}
	srv.Restart(t)
	waitFor(t, rdb)
	if r := post(t, web.URL, "after", "1s"); r.status != 201 || n.Load() != 3 {
		t.Fatalf("after the restart: %+v", r)
	}
	if r := post(t, web.URL, "after", "1s"); !r.replayed {
		t.Fatalf("repeat after the restart: %+v", r)
	}
}

// waitFor waits until rdb reaches its server again.
func waitFor(t *testing.T, rdb *redis.Client) {
	t.Helper()
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if i > 500 {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTwoServicesOneRedis settles what two services sharing one Redis meet when a
// client sends both the same key (or one forwards it): each service gives its store
// its own prefix (WithPrefix), and then each runs its own request once and replays
// only its own answer. On the shared default prefix the second service's request,
// were its method, path and body the first's, would get the first service's answer:
// redisstore's doc says so, and this test keeps the prefixes' isolation true.
func TestTwoServicesOneRedis(t *testing.T) {
	srv := redistest.Start(t)
	rdb, _ := client(t, srv)
	var nOrders, nPayments atomic.Int64
	orders := httptest.NewServer(withTimeout(dedup.NewMiddleware(redisstore.New(rdb, redisstore.WithPrefix("orders:"), roomy))(charge(&nOrders, nil))))
	defer orders.Close()
	payments := httptest.NewServer(withTimeout(dedup.NewMiddleware(redisstore.New(rdb, redisstore.WithPrefix("payments:"), roomy))(charge(&nPayments, nil))))
	defer payments.Close()
	for range 2 {
		if r := post(t, orders.URL, "k", "1s"); r.status != 201 {
			t.Fatalf("orders: %+v", r)
		}
		if r := post(t, payments.URL, "k", "1s"); r.status != 201 {
			t.Fatalf("payments: %+v", r)
		}
	}
	if nOrders.Load() != 1 || nPayments.Load() != 1 {
		t.Fatalf("orders ran %d times, payments %d: want each once", nOrders.Load(), nPayments.Load())
	}
}

// BenchmarkFirstRequest: a first request (lease, handler, completion) and a replay
// through the dedup middleware on one Redis, over a client with go-redis's
// defaults (New adds its dial hook to it: each command passes one more hook).
//
//	go test -run '^$' -bench '^BenchmarkFirstRequest$' -benchtime 3000x ./dedup/redisstore/
func BenchmarkFirstRequest(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	h := dedup.NewMiddleware(redisstore.New(rdb))(newRuns())
	for i := range 100 { // warm: connections, scripts
		do(h, fmt.Sprintf("warm-%d", i), time.Second)
	}
	runs := 0
	for _, replay := range []bool{false, true} {
		name := map[bool]string{false: "first", true: "replay"}[replay]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			runs++
			key := func(i int) string { return fmt.Sprintf("k-%d-%d", runs, i) }
			if replay {
				do(h, "replayed", time.Second)
				key = func(int) string { return "replayed" }
			}
			i := 0
			for b.Loop() {
				if code, _ := do(h, key(i), time.Second); code != http.StatusCreated {
					b.Fatalf("status %d", code)
				}
				i++
			}
		})
	}
}
