package dedupcmp_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/dedup/redisstore"
	"github.com/deadlinekit/deadlinekit/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// roundTrips counts the commands a client sends (a script is one).
type roundTrips struct{ n atomic.Int64 }

func (c *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(1); return next(ctx, cmds) }
}

type stores struct {
	mem   dedup.Store
	redis dedup.Store
	rt    *roundTrips
}

func newStores(b *testing.B) stores {
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 128})
	b.Cleanup(func() { rdb.Close() })
	rt := &roundTrips{}
	rdb.AddHook(rt)
	return stores{mem: dedup.NewMemoryStore(dedup.WithMaxEntries(10_000_000), dedup.WithMaxBytes(1<<30)), redis: redisstore.New(rdb), rt: rt}
}

// handler answers 201 with a small JSON body, as a charge endpoint would.
var handled atomic.Int64

var handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	handled.Add(1)
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write([]byte(`{"id":"ch_1","amount":100,"status":"succeeded"}`))
})

var body = []byte(`{"amount":100,"currency":"eur","source":"tok_visa"}`)

// discard is a ResponseWriter that keeps nothing, reset per request.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

var (
	runs     atomic.Int64
	prefixes atomic.Value
)

type variant struct {
	name  string
	store func(stores) dedup.Store
	key   func(i int) string // "" : no key
	rt    bool               // count Redis round trips
}

func variants() []variant {
	// A prefix per run of a sub-benchmark (each -count, each b.N), so that every
	// run sends first requests.
	fresh := func(p string) func(int) string {
		return func(i int) string {
			if i < 0 {
				prefixes.Store(p + strconv.FormatInt(runs.Add(1), 10) + "-")
			}
			return prefixes.Load().(string) + strconv.Itoa(i)
		}
	}
	same := func(k string) func(int) string { return func(int) string { return k } }
	return []variant{
		{"no-key", func(s stores) dedup.Store { return s.mem }, nil, false},
		{"memory/first", func(s stores) dedup.Store { return s.mem }, fresh("mf-"), false},
		{"memory/replay", func(s stores) dedup.Store { return s.mem }, same("mr"), false},
		{"redis/first", func(s stores) dedup.Store { return s.redis }, fresh("rf-"), true},
		{"redis/replay", func(s stores) dedup.Store { return s.redis }, same("rr"), true},
	}
}

// BenchmarkInProcess is the middleware's own cost: ServeHTTP on a prepared request,
// no network. Every variant's timed loop does the same work outside the middleware:
// the keys are built before the timer, in one string, and each request sets one
// header from them with a slice made once; no-key sets it under a name dedup
// ignores, so that what a keyed variant adds to no-key is dedup's alone.
func BenchmarkInProcess(b *testing.B) {
	s := newStores(b)
	for _, v := range variants() {
		b.Run(v.name, func(b *testing.B) {
			h := dedup.NewMiddleware(v.store(s))(handler)
			rd := bytes.NewReader(body)
			req := httptest.NewRequest(http.MethodPost, "/charges?customer=c1", nil)
			req = req.WithContext(context.Background())
			w := &discard{h: http.Header{}}
			name, key := "X-Request-Id", v.key
			if key != nil {
				name = "Idempotency-Key"
			} else {
				key = variants()[1].key // keys of the same shape, which dedup does not see
			}
			vals := []string{""}
			serve := func(k string) {
				rd.Reset(body)
				req.Body = io.NopCloser(rd)
				req.ContentLength = int64(len(body))
				vals[0] = k
				req.Header[name] = vals
				clear(w.h)
				h.ServeHTTP(w, req)
			}
			serve(key(-1)) // the replay's first, and the scripts loaded
			keys := prebuilt(key, b.N)
			before, ran := s.rt.n.Load(), handled.Load()
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime()
			for i := range b.N {
				serve(keys.at(i))
			}
			cpu = cpuTime() - cpu
			b.StopTimer()
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op") // less moved by other processes than ns/op
			b.ReportMetric(float64(handled.Load()-ran)/float64(b.N), "runs/op")
			if v.rt {
				b.ReportMetric(float64(s.rt.n.Load()-before)/float64(b.N), "redis-rt/op")
			}
		})
	}
}

// keyList is n keys in one string, with no pointer per key for the GC to follow.
type keyList struct {
	all  string
	ends []uint32
}

// prebuilt is key(0) … key(n-1), built before the timer.
func prebuilt(key func(int) string, n int) keyList {
	var sb strings.Builder
	ends := make([]uint32, n)
	for i := range n {
		sb.WriteString(key(i))
		ends[i] = uint32(sb.Len())
	}
	return keyList{all: sb.String(), ends: ends}
}

func (l keyList) at(i int) string {
	start := uint32(0)
	if i > 0 {
		start = l.ends[i-1]
	}
	return l.all[start:l.ends[i]]
}

// BenchmarkLoopback is one request at a time over loopback HTTP.
func BenchmarkLoopback(b *testing.B) {
	s := newStores(b)
	for _, v := range variants() {
		b.Run(v.name, func(b *testing.B) {
			srv := httptest.NewServer(dedup.NewMiddleware(v.store(s))(handler))
			defer srv.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: 64}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			send := func(i int) {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges?customer=c1", bytes.NewReader(body))
				if v.key != nil {
					req.Header.Set("Idempotency-Key", v.key(i))
				}
				resp, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			send(-1)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				send(i)
			}
		})
	}
}

// BenchmarkParallel64 is 64 callers at once on distinct keys (every request a first
// one), over loopback: requests per second.
func BenchmarkParallel64(b *testing.B) {
	s := newStores(b)
	for _, v := range variants() {
		if v.name != "no-key" && v.name != "memory/first" && v.name != "redis/first" {
			continue
		}
		b.Run(v.name, func(b *testing.B) {
			srv := httptest.NewServer(dedup.NewMiddleware(v.store(s))(handler))
			defer srv.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			var seq atomic.Int64
			if v.key != nil {
				v.key(-1) // a fresh prefix
			}
			b.SetParallelism((64 + 1) / 2) // × GOMAXPROCS (2 here) = 64 callers
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := int(seq.Add(1))
					req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", bytes.NewReader(body))
					if v.key != nil {
						req.Header.Set("Idempotency-Key", v.key(i))
					}
					resp, err := c.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
		})
	}
}

// BenchmarkWaitedRepeat measures how late a waiting repeat learns of the first's
// answer: the first's handler takes 20 ms, the repeat arrives 1 ms after it, and the
// figure is the time from the first's answer to the repeat's (memory: woken at once;
// Redis: polled).
func BenchmarkWaitedRepeat(b *testing.B) {
	s := newStores(b)
	for _, v := range []struct {
		name  string
		store dedup.Store
	}{{"memory", s.mem}, {"redis", s.redis}} {
		b.Run(v.name, func(b *testing.B) {
			slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				time.Sleep(20 * time.Millisecond)
				w.WriteHeader(http.StatusCreated)
			})
			h := dedup.NewMiddleware(v.store)(slow)
			var late time.Duration
			for i := range b.N {
				key := "wait-" + strconv.FormatInt(runs.Add(1), 10) + "-" + strconv.Itoa(i)
				firstDone := make(chan time.Time, 1)
				go func() {
					h.ServeHTTP(&discard{h: http.Header{}}, keyedReq(key))
					firstDone <- time.Now()
				}()
				time.Sleep(time.Millisecond)
				h.ServeHTTP(&discard{h: http.Header{}}, keyedReq(key))
				late += time.Since(<-firstDone)
			}
			b.ReportMetric(float64(late.Microseconds())/float64(b.N), "µs-late/op")
		})
	}
}

func keyedReq(key string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/charges", bytes.NewReader(body))
	r.Header.Set("Idempotency-Key", key)
	return r
}
