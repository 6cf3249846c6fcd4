package retry_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit/retry"
)

// naive is what each layer does without the toolkit: up to 3 attempts on any error
// or 5xx, at once, with no budget, no deadline rule, no one-layer rule.
type naive struct{ base http.RoundTripper }

func (n naive) RoundTrip(req *http.Request) (*http.Response, error) {
	var resp *http.Response
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		r := req.Clone(req.Context())
		resp, err = n.base.RoundTrip(r)
		if err == nil && resp.StatusCode < 500 {
			return resp, nil
		}
		if attempt < 3 && resp != nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	return resp, err
}

// chain is user → L1 → L2 → bottom on loopback. Each arrow retries: naively, or
// with the toolkit (retry.NewTransport on the clients, retry.NewMiddleware on L1, L2).
type chain struct {
	bottomHits atomic.Int64
	bottomDown atomic.Bool
	user       *http.Client
	entry      string
	close      func()
}

// newChain builds the chain; opts, when not nil, gives the options of each client
// (called once per client, so that each gets a budget of its own, as by default).
func newChain(t *testing.T, toolkit bool, opts func() []retry.Option) *chain {
	t.Helper()
	c := &chain{}
	c.bottomDown.Store(true)
	var closers []func()
	client := func() *http.Client {
		base := &http.Transport{MaxIdleConnsPerHost: 64}
		closers = append(closers, base.CloseIdleConnections)
		if toolkit {
			var o []retry.Option
			if opts != nil {
				o = opts()
			}
			return &http.Client{Transport: retry.NewTransport(base, o...)}
		}
		return &http.Client{Transport: naive{base}}
	}
	serve := func(h http.Handler) string {
		if toolkit {
			h = retry.NewMiddleware()(h)
		}
		s := httptest.NewServer(h)
		closers = append(closers, s.Close)
		return s.URL
	}
	relay := func(next string) http.Handler {
		cl := client()
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			req, _ := http.NewRequestWithContext(r.Context(), "GET", next, nil)
			resp, err := cl.Do(req)
			if err != nil {
				code := http.StatusServiceUnavailable
				if errors.Is(err, context.DeadlineExceeded) {
					code = http.StatusGatewayTimeout
				}
				http.Error(w, err.Error(), code)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			w.WriteHeader(resp.StatusCode)
		})
	}
	bottom := serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.bottomHits.Add(1)
		if c.bottomDown.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
		}
	}))
	l2 := serve(relay(bottom))
	c.entry = serve(relay(l2))
	c.user = client()
	c.close = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	return c
}

func (c *chain) call(t *testing.T) (int, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", c.entry, nil)
	start := time.Now()
	resp, err := c.user.Do(req)
	took := time.Since(start)
	if err != nil {
		return 0, took
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, took
}

// TestAmplification: three layers each retrying 3 times while the bottom service is
// down. Without the toolkit, 27 calls reach the bottom per user request; with it, at
// most 3 (only the layer next to the failure retries).
func TestAmplification(t *testing.T) {
	const requests = 10
	for _, toolkit := range []bool{false, true} {
		c := newChain(t, toolkit, nil)
		var total time.Duration
		for range requests {
			code, took := c.call(t)
			total += took
			if code == http.StatusOK {
				t.Fatal("a call through a down bottom succeeded")
			}
		}
		c.close()
		per := float64(c.bottomHits.Load()) / requests
		name := "without toolkit (each layer retries 3×)"
		if toolkit {
			name = "with deadlinekit retry (default options)"
		}
		t.Logf("3-layer chain, bottom down, %s: %.1f calls reach the bottom per user request; mean time to fail %v",
			name, per, (total / requests).Round(10*time.Microsecond))
		if !toolkit && per != 27 {
			t.Errorf("naive chain: %.1f per request; want 27", per)
		}
		if toolkit && per > 3 {
			t.Errorf("toolkit chain: %.1f per request; want ≤ 3", per)
		}
	}
}

// TestAmplificationSustainedOutage: the same chain, with the toolkit, first healthy
// then down for a long stretch. The retry budget keeps the retries reaching the bottom
// within ratio × recent successes + the floor.
func TestAmplificationSustainedOutage(t *testing.T) {
	const healthy, outage = 500, 500
	for _, floor := range []float64{1, retry.DefaultBudgetMinPerSecond} {
		c := newChain(t, true, func() []retry.Option {
			return []retry.Option{fast, retry.WithBudget(retry.NewBudget(retry.DefaultBudgetRatio, floor, retry.DefaultBudgetTTL))}
		})
		c.bottomDown.Store(false)
		for range healthy {
			if code, _ := c.call(t); code != http.StatusOK {
				t.Fatalf("healthy phase: %d", code)
			}
		}
		c.bottomDown.Store(true)
		before := c.bottomHits.Load()
		start := time.Now()
		for range outage {
			c.call(t)
		}
		elapsed := time.Since(start)
		c.close()
		retries := c.bottomHits.Load() - before - outage
		// L2's budget: ratio × its successes (healthy phase, all within the TTL) + floor × TTL.
		limit := int64(retry.DefaultBudgetRatio*healthy + floor*retry.DefaultBudgetTTL.Seconds())
		t.Logf("sustained outage, budget 10%% + floor %v/s: %d user requests (%d healthy, then %d in %v with the bottom down): %d retries reached the bottom (%.1f%% of the outage requests, %.1f%% of all traffic); bound 10%% × %d successes + %v/s × 10 s = %d; without a budget: %d",
			floor, healthy+outage, healthy, outage, elapsed.Round(time.Millisecond), retries,
			100*float64(retries)/outage, 100*float64(retries)/(healthy+outage), healthy, floor, limit, 2*outage)
		if retries > limit {
			t.Errorf("%d retries; want ≤ %d", retries, limit)
		}
	}
}
