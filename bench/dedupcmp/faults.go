package dedupcmp

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/dedup/redisstore"
	"github.com/deadlinekit/deadlinekit/internal/redistest"
)

// FaultConfig shapes the exactly-once harness.
type FaultConfig struct {
	Requests    int           // logical requests, each with its own key
	Concurrency int           // logical requests in flight at once
	Deadline    time.Duration // each logical request's budget
	LossRatio   float64       // share of answers lost after the handler ran
	Work        time.Duration // the handler's work, uniform in [Work/2, Work]
	Seed        uint64
	// NoDedup runs the replicas without deduplication, for comparison.
	NoDedup bool
	// NoKill and NoRestart leave out the replica's death and Redis's restart.
	NoKill, NoRestart bool
	// Volatile runs Redis without persistence: its restart loses every record.
	// Otherwise it keeps an append-only file written on every command.
	Volatile bool
}

// DefaultFaults is the harness: 10,000 logical requests, each sent 1–3
// times (concurrent copies), 10% of answers lost after the handler ran, one of two
// replicas killed at a third of the run, Redis restarted at two thirds.
var DefaultFaults = FaultConfig{Requests: 10_000, Concurrency: 64, Deadline: 2 * time.Second, LossRatio: 0.1, Work: 4 * time.Millisecond, Seed: 1}

// FaultResult is what the harness saw.
type FaultResult struct {
	Requests, Copies   int
	Executions         map[int]int // executions per key → number of keys
	Answered           int         // logical requests at least one copy of which got a 2xx
	NeverAnswered      int
	WaitedPastDeadline int64 // repeats (replayed or 409) answered after their own deadline
	Lost               int64 // answers the transport lost
	KilledAt, RedisAt  int   // the logical request at which a replica was killed, Redis restarted
	Took               time.Duration
}

// replica is one server of the charge endpoint.
type replica struct {
	srv  *http.Server
	url  string
	dead atomic.Bool
	hang chan struct{} // a dead replica's handlers block on it until the run ends
}

// RunFaults runs the harness on a redis-server it starts itself.
func RunFaults(cfg FaultConfig) (FaultResult, error) {
	res := FaultResult{Requests: cfg.Requests, Executions: map[int]int{}}
	var rs *redistest.Server
	var err error
	if cfg.Volatile {
		rs, err = redistest.Run()
	} else {
		dir, derr := os.MkdirTemp("", "dedupbench-redis-")
		if derr != nil {
			return res, derr
		}
		defer os.RemoveAll(dir)
		rs, err = redistest.RunPersistent(dir)
	}
	if err != nil {
		return res, err
	}
	defer rs.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr, ContextTimeoutEnabled: true, PoolSize: 256,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1})
	defer rdb.Close()

	var executions sync.Map // key → *atomic.Int64
	var waitedPast atomic.Int64
	hang := make(chan struct{})
	var replicas [2]*replica
	for i := range replicas {
		r := &replica{hang: hang}
		charge := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			io.Copy(io.Discard, req.Body)
			key := req.Header.Get("Idempotency-Key")
			time.Sleep(cfg.Work/2 + time.Duration(rand.Int64N(int64(cfg.Work/2)+1)))
			if r.dead.Load() {
				<-r.hang // the process died before the charge
				return
			}
			v, _ := executions.LoadOrStore(key, new(atomic.Int64))
			n := v.(*atomic.Int64).Add(1)
			if r.dead.Load() {
				<-r.hang // it died after the charge, before its answer was stored
				return
			}
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "charge %s #%d", key, n)
		})
		var h http.Handler = charge
		if !cfg.NoDedup {
			h = deadlinekit.NewHandler(charge, deadlinekit.WithDedup(redisstore.New(rdb)))
		} else {
			h = deadlinekit.NewHandler(charge)
		}
		h = watchRepeats(h, &waitedPast)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return res, err
		}
		r.srv = &http.Server{Handler: h}
		r.url = "http://" + l.Addr().String()
		go r.srv.Serve(l)
		replicas[i] = r
	}
	defer func() {
		// The dead replica's handlers return, and give their keys up while Redis is
		// still there: wait for them.
		close(hang)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, r := range replicas {
			if r.srv.Shutdown(ctx) != nil {
				r.srv.Close()
			}
		}
	}()

	base := &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 0}
	defer base.CloseIdleConnections()
	lossy := &lossyBalancer{base: base, replicas: replicas[:], ratio: cfg.LossRatio, seed: cfg.Seed}
	client := &http.Client{Transport: deadlinekit.NewTransport(lossy)}

	rng := rand.New(rand.NewPCG(cfg.Seed, 2))
	copies := make([]int, cfg.Requests)
	for i := range copies {
		copies[i] = 1 + rng.IntN(3)
		res.Copies += copies[i]
	}
	res.KilledAt, res.RedisAt = cfg.Requests/3, 2*cfg.Requests/3
	answered := make([]atomic.Bool, cfg.Requests)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	var killOnce, restartOnce sync.Once
	var restartErr error
	for range cfg.Concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.Requests {
					return
				}
				if i >= res.KilledAt && !cfg.NoKill {
					killOnce.Do(func() {
						replicas[1].dead.Store(true)
						replicas[1].srv.SetKeepAlivesEnabled(false)
						lossy.kill(1)
					})
				}
				if i >= res.RedisAt && !cfg.NoRestart {
					restartOnce.Do(func() { go func() { restartErr = rs.RestartErr() }() })
				}
				key := "order-" + strconv.Itoa(i)
				ctx, cancel := context.WithTimeout(context.Background(), cfg.Deadline)
				var cw sync.WaitGroup
				for range copies[i] {
					cw.Go(func() {
						req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://charges/charges", strings.NewReader(`{"amount":100}`))
						req.Header.Set("Idempotency-Key", key)
						resp, err := client.Do(req)
						if err != nil {
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode/100 == 2 {
							answered[i].Store(true)
						}
					})
				}
				cw.Wait()
				cancel()
			}
		})
	}
	wg.Wait()
	res.Took = time.Since(start)
	if restartErr != nil {
		return res, restartErr
	}
	for i := range cfg.Requests {
		key := "order-" + strconv.Itoa(i)
		n := 0
		if v, ok := executions.Load(key); ok {
			n = int(v.(*atomic.Int64).Load())
		}
		if answered[i].Load() {
			res.Answered++
			res.Executions[n]++
		} else {
			res.NeverAnswered++
		}
	}
	res.WaitedPastDeadline = waitedPast.Load()
	res.Lost = lossy.lost.Load()
	return res, nil
}

// watchRepeats counts the repeats (a replay, or a 409) answered after their own
// deadline: a repeat must never wait past it.
func watchRepeats(h http.Handler, past *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &statusOf{ResponseWriter: w, arrived: time.Now()}
		h.ServeHTTP(rw, r)
		// The caller's budget when it sent the attempt came in X-Sent-Budget-Ms.
		if rw.repeat {
			if ms, err := strconv.Atoi(r.Header.Get("X-Sent-Budget-Ms")); err == nil && time.Since(rw.arrived) > time.Duration(ms)*time.Millisecond {
				past.Add(1)
			}
		}
	})
}

type statusOf struct {
	http.ResponseWriter
	repeat  bool
	arrived time.Time
}

func (s *statusOf) WriteHeader(code int) {
	s.repeat = code == http.StatusConflict || s.Header().Get("Idempotent-Replayed") == "true"
	s.ResponseWriter.WriteHeader(code)
}

// lossyBalancer sends each attempt to a live replica, and loses a share of the
// answers after the server ran the request.
type lossyBalancer struct {
	base     http.RoundTripper
	replicas []*replica
	ratio    float64
	seed     uint64
	n        atomic.Uint64
	lost     atomic.Int64
	deadMu   sync.Mutex
	deadSet  map[int]bool
}

func (l *lossyBalancer) kill(i int) {
	l.deadMu.Lock()
	defer l.deadMu.Unlock()
	if l.deadSet == nil {
		l.deadSet = map[int]bool{}
	}
	l.deadSet[i] = true
}

func (l *lossyBalancer) RoundTrip(req *http.Request) (*http.Response, error) {
	n := l.n.Add(1)
	i := int(n % uint64(len(l.replicas)))
	l.deadMu.Lock()
	if l.deadSet[i] {
		i = (i + 1) % len(l.replicas)
	}
	l.deadMu.Unlock()
	out := req.Clone(req.Context())
	u := *req.URL
	host := strings.TrimPrefix(l.replicas[i].url, "http://")
	u.Host = host
	out.URL, out.Host = &u, host
	if d, ok := req.Context().Deadline(); ok {
		out.Header.Set("X-Sent-Budget-Ms", strconv.FormatInt(int64(time.Until(d)/time.Millisecond), 10))
	}
	resp, err := l.base.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	if r := rand.New(rand.NewPCG(l.seed, n)).Float64(); r < l.ratio {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		l.lost.Add(1)
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return resp, nil
}
