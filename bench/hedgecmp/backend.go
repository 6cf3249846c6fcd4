// Package hedgecmp compares hedging HTTP clients side by side against one loopback
// backend with a heavy-tailed latency: no hedging, deadlinekit's hedge package,
// cristalhq/hedgedhttp and failsafe-go's hedge policy. cmd/hedgebench runs it and
// prints markdown tables.
//
// Everything talks to 127.0.0.1 only; every run is bounded in calls and in time.
package hedgecmp

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
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

// Backend is an HTTP server on 127.0.0.1 whose answer time is drawn per request from
// its Tail (scaled by 10 once Shift is called). It counts the requests it receives.
type Backend struct {
	URL  string
	tail Tail

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
func NewBackend(tail Tail, seed uint64) (*Backend, error) {
	lis, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &Backend{URL: "http://" + lis.Addr().String() + "/", tail: tail, lis: lis, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	b.srv = &http.Server{Handler: http.HandlerFunc(b.serve), ReadHeaderTimeout: 10 * time.Second}
	go b.srv.Serve(lis)
	return b, nil
}

func (b *Backend) serve(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	d := b.tail.draw(b.rng.Float64(), b.rng.Float64())
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
