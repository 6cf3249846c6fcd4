package redisstore_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/dedup/redisstore"
	"github.com/deadlinekit/deadlinekit/internal/redistest"
)

// clusterClient is a client on c as a service would build it: every call bounded
// by its context, short dial and read timeouts, go-redis's default redirects.
func clusterClient(tb testing.TB, c *redistest.Cluster) *redis.ClusterClient {
	tb.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second})
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

// runs counts a handler's executions per idempotency key; a first execution may
// be held (it keeps its lease) until hold is closed.
type runs struct {
	mu      sync.Mutex
	n       map[string]int
	started map[string]func() // called once, when the key's handler first runs
	hold    chan struct{}     // a first run waits for it while holding
	holding bool
}

func newRuns() *runs { return &runs{n: map[string]int{}, started: map[string]func(){}} }

// onStart registers f to be called when k's handler first runs; f nil calls the
// registered one now if it was not called (the request returned without running).
func (r *runs) onStart(k string, f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f != nil {
		r.started[k] = f
		return
	}
	if g := r.started[k]; g != nil {
		delete(r.started, k)
		g()
	}
}

func (r *runs) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	k := req.Header.Get("Idempotency-Key")
	r.mu.Lock()
	r.n[k]++
	first := r.n[k] == 1 && r.holding
	if g := r.started[k]; g != nil {
		delete(r.started, k)
		g()
	}
	r.mu.Unlock()
	if first {
		<-r.hold
	}
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "ran %s", k)
}

func (r *runs) count(k string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[k]
}

// do serves one keyed request with budget on h and returns its status and whether
// it was a replay.
func do(h http.Handler, key string, budget time.Duration) (int, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/charges", strings.NewReader("100"))
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Header().Get(dedup.ReplayedHeader) == "true"
}

// onMaster returns the first key prefix+i whose record (under the default prefix
// and scope) was on c.Masters[m] when c was formed.
func onMaster(c *redistest.Cluster, m int, prefix string) string {
	for i := 0; ; i++ {
		k := prefix + fmt.Sprint(i)
		if c.MasterOf(redistest.Slot(redisstore.DefaultPrefix+"{0::"+k+"}")) == m {
			return k
		}
	}
}

// TestClusterFailover: keys spread over a 3-master cluster are taken, completed and
// repeated by four workers while one master is killed (SIGKILL). Requests that meet
// the dead master get 503 and run nothing; once the replica took over, the store
// works again: fresh keys run once and replay, and every key's repeat is answered.
func TestClusterFailover(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	rdb := clusterClient(t, c)
	r := newRuns()
	h := dedup.NewMiddleware(redisstore.New(rdb, roomy))(r)
	var unavailable, doubled atomic.Int64
	round := func(prefix string, n int, mid func()) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
					if i == int64(n/3) && mid != nil {
						mid()
					}
					k := fmt.Sprintf("%s%d", prefix, i)
					for range 2 { // the first request, then its repeat
						if code, _ := do(h, k, time.Second); code == http.StatusServiceUnavailable {
							unavailable.Add(1)
						}
					}
				}
			})
		}
		wg.Wait()
	}
	victim := c.Masters[0]
	round("before-", 300, nil)
	round("during-", 600, func() { c.Kill(victim) })
	c.WaitFailover(t)
	t.Logf("during the failover: %d of 1200 requests answered 503", unavailable.Load())

	// The store works again once go-redis knows the new master: a request that
	// met the dead master made the store reload the client's slot map.
	start := time.Now()
	for i := 0; ; i++ {
		code, _ := do(h, onMaster(c, 0, fmt.Sprintf("probe-%d-", i)), time.Second)
		if code == http.StatusCreated {
			break
		}
		if time.Since(start) > 10*time.Second { // go-redis's own reload comes after 60 s
			t.Fatalf("10 s after the failover, the store still answers %d", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the store worked again %v after the failover ended", time.Since(start).Round(time.Millisecond))
	unavailable.Store(0)
	round("after-", 300, nil)
	if n := unavailable.Load(); n != 0 {
		t.Errorf("after the failover: %d requests answered 503", n)
	}
	for i := range 300 {
		k := fmt.Sprintf("after-%d", i)
		if code, replayed := do(h, k, time.Second); code != http.StatusCreated || !replayed || r.count(k) != 1 {
			t.Fatalf("key %s after the failover: %d replayed %v, ran %d times", k, code, replayed, r.count(k))
		}
	}
	for _, p := range []string{"before-", "during-"} {
		for i := range map[string]int{"before-": 300, "during-": 600}[p] {
			k := p + fmt.Sprint(i)
			if code, _ := do(h, k, time.Second); code != http.StatusCreated {
				t.Fatalf("repeat of %s after the failover: %d", k, code)
			}
			if r.count(k) > 1 {
				doubled.Add(1)
			}
		}
	}
	t.Logf("keys run twice across the failover: %d of 900", doubled.Load())
}
