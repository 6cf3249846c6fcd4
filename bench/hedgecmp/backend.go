// Package hedgecmp compares hedging HTTP clients side by side against one loopback
// backend with a heavy-tailed latency: no hedging, deadlinekit's hedge package,
// cristalhq/hedgedhttp and failsafe-go's hedge policy. cmd/hedgebench runs it and
// prints markdown tables.
//
// Everything talks to 127.0.0.1 only; every run is bounded in calls and in time.
package hedgecmp

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Tail is a latency distribution: each request independently takes about Fast
// (probability 1 − PMid − PSlow), Mid (PMid) or Slow (PSlow), times a uniform jitter
// in [1 − Jitter, 1 + Jitter].
type Tail struct {
	Fast, Mid, Slow time.Duration
	PMid, PSlow     float64
	Jitter          float64
}

// DefaultTail is the backend: 98% about 5 ms, 1.5% about 50 ms, 0.5% about
// 500 ms, ±20%.
var DefaultTail = Tail{
	Fast: 5 * time.Millisecond, Mid: 50 * time.Millisecond, Slow: 500 * time.Millisecond,
	PMid: 0.015, PSlow: 0.005, Jitter: 0.2,
}

// Dist is a latency distribution the backend draws each request's time from.
type Dist interface {
	Draw(r *rand.Rand) time.Duration
	String() string
}

// Draw draws one latency.
func (t Tail) Draw(r *rand.Rand) time.Duration { return t.draw(r.Float64(), r.Float64()) }

func (t Tail) String() string {
	return fmt.Sprintf("%.1f%% ~%v, %.1f%% ~%v, %.1f%% ~%v (±%.0f%%)", 100*(1-t.PMid-t.PSlow), t.Fast, 100*t.PMid, t.Mid, 100*t.PSlow, t.Slow, 100*t.Jitter)
}

// draw returns a latency for uniform numbers u, v in [0, 1).
func (t Tail) draw(u, v float64) time.Duration {
	d := t.Fast
	switch {
	case u < t.PSlow:
		d = t.Slow
	case u < t.PSlow+t.PMid:
		d = t.Mid
	}
	return time.Duration(float64(d) * (1 - t.Jitter + 2*t.Jitter*v))
}

// LogPareto is a lognormal body (median Median, log-spread Sigma) with, for a share
// PTail of the requests, a Pareto tail instead (scale Scale, shape Alpha), cut at
// Cap.
type LogPareto struct {
	Median time.Duration
	Sigma  float64
	PTail  float64
	Scale  time.Duration
	Alpha  float64
	Cap    time.Duration
}

// HiddenTail is the second distribution of the seed sweep, fixed before any result
// on it was seen and never tuned on: a lognormal body around 5 ms, 3% of requests
// from a Pareto tail from 10 ms (shape 1.1), cut at 2 s.
var HiddenTail = LogPareto{Median: 5 * time.Millisecond, Sigma: 0.25, PTail: 0.03, Scale: 10 * time.Millisecond, Alpha: 1.1, Cap: 2 * time.Second}

// Draw draws one latency.
func (l LogPareto) Draw(r *rand.Rand) time.Duration {
	if r.Float64() < l.PTail {
		// Inverse CDF of the Pareto law; 1 − u is in (0, 1].
		d := float64(l.Scale) / math.Pow(1-r.Float64(), 1/l.Alpha)
		return time.Duration(min(d, float64(l.Cap)))
	}
	return time.Duration(float64(l.Median) * math.Exp(l.Sigma*r.NormFloat64()))
}

func (l LogPareto) String() string {
	return fmt.Sprintf("lognormal (median %v, σ %.2f); %.1f%% Pareto (from %v, shape %.1f, cut at %v)", l.Median, l.Sigma, 100*l.PTail, l.Scale, l.Alpha, l.Cap)
}

// TrueQuantiles returns the q-quantiles of d, from a million draws of a fixed seed:
// the delays of the oracle variants.
func TrueQuantiles(d Dist, qs ...float64) []time.Duration {
	r := rand.New(rand.NewPCG(42, 4242))
	xs := make([]time.Duration, 1_000_000)
	for i := range xs {
		xs[i] = d.Draw(r)
	}
	slices.Sort(xs)
	out := make([]time.Duration, len(qs))
	for i, q := range qs {
		out[i] = pct(xs, q)
	}
	return out
}

// Backend is an HTTP server on 127.0.0.1 whose answer time is drawn per request from
// its Dist (scaled by 10 once Shift is called). It counts the requests it receives.
type Backend struct {
	URL  string
	dist Dist

	srv      *http.Server
	lis      net.Listener
	mu       sync.Mutex
	rng      *rand.Rand
	shifted  atomic.Bool
	requests atomic.Int64 // received before the shift
	after    atomic.Int64 // received after it
}

// NewBackend starts a backend on a free port of 127.0.0.1. seed makes the latency
// sequence reproducible (up to the order in which concurrent requests arrive).
func NewBackend(dist Dist, seed uint64) (*Backend, error) {
	lis, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &Backend{URL: "http://" + lis.Addr().String() + "/", dist: dist, lis: lis, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	b.srv = &http.Server{Handler: http.HandlerFunc(b.serve), ReadHeaderTimeout: 10 * time.Second}
	go b.srv.Serve(lis)
	return b, nil
}

func (b *Backend) serve(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	d := b.dist.Draw(b.rng)
	b.mu.Unlock()
	if b.shifted.Load() {
		d *= 10
	}
	// Requests are counted by the phase of the call they belong to, which the
	// client writes in a header (hedges copy it), not by their arrival time.
	if r.Header.Get(PhaseHeader) == "after" {
		b.after.Add(1)
	} else {
		b.requests.Add(1)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		w.Write([]byte("ok"))
	case <-r.Context().Done(): // a loser, cancelled by its client
	}
}

// PhaseHeader marks the requests of calls started after the shift.
const PhaseHeader = "X-Bench-Phase"

// Shift makes every later request ten times slower.
func (b *Backend) Shift() { b.shifted.Store(true) }

// Reset clears the counters and the shift.
func (b *Backend) Reset() {
	b.shifted.Store(false)
	b.requests.Store(0)
	b.after.Store(0)
}

// Requests returns the requests received for calls started before and after the
// shift.
func (b *Backend) Requests() (before, after int64) { return b.requests.Load(), b.after.Load() }

// Close stops the server.
func (b *Backend) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := b.srv.Shutdown(ctx)
	if err != nil {
		b.srv.Close()
	}
	return err
}
