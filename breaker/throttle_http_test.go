package breaker_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/retry"
)

// countOnly is a throttle whose window outlasts any test: what it decides depends on
// the counts alone, not on how fast a loaded machine runs the calls.
var countOnly = breaker.WithAdaptiveThrottling(breaker.Throttle{Window: time.Hour})

// refuser is a loopback HTTP server that refuses for load: 503 with Retry-After,
// as an overloaded toolkit server answers, when refuse says so for the n-th request
// (counting from 1) of level l.
type refuser struct {
	*httptest.Server
	hits   [4]atomic.Int64 // by level, lowest first
	refuse func(n int64, l criticality.Level) bool
	relay  bool // mark every refusal as a downstream's (deadlinekit-relayed: 1)
	soon   bool // say "come back in 1 ms" (grpc-retry-pushback-ms) rather than Retry-After: 1
}

func newRefuser(t *testing.T, refuse func(n int64, l criticality.Level) bool) *refuser {
	s := &refuser{refuse: refuse}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l := criticality.Critical
		if v := r.Header.Get(criticality.Header); v != "" {
			l, _ = criticality.Parse(v)
		}
		n := s.hits[l-criticality.Sheddable].Add(1)
		if s.refuse(n, l) {
			if s.soon {
				w.Header().Set(pushback.Key, "1")
			} else {
				w.Header().Set(pushback.RetryAfterKey, "1")
			}
			if s.relay {
				w.Header().Set(pushback.RelayedKey, pushback.Yes)
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *refuser) total() int64 {
	var n int64
	for i := range s.hits {
		n += s.hits[i].Load()
	}
	return n
}

// levelled sends a GET to url at level l, saying the level as propagate would.
func levelled(t *testing.T, client *http.Client, url string, l criticality.Level) (int, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(criticality.With(bg, l), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(criticality.Header, l.String())
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// fourFifths refuses four requests in five, whatever their level.
func fourFifths(n int64, _ criticality.Level) bool { return n%5 != 0 }

func TestThrottleSendsLessToARefusingServer(t *testing.T) {
	const calls = 400
	hits := map[bool]int64{}
	for _, on := range []bool{false, true} {
		srv := newRefuser(t, fourFifths)
		opts := []breaker.Option{breaker.WithoutAdaptiveThrottling()}
		if on {
			opts = append(opts, countOnly)
		}
		b := breaker.New(opts...)
		client := &http.Client{Transport: b.Transport(nil)}
		throttled := 0
		for range calls {
			code, err := levelled(t, client, srv.URL, criticality.Critical)
			switch {
			case errors.Is(err, breaker.ErrThrottled):
				throttled++
			case err != nil || (code != 503 && code != 200):
				t.Fatalf("throttling %v: %d %v", on, code, err)
			}
		}
		client.CloseIdleConnections()
		hits[on] = srv.total()
		if st := b.Stats(); hits[on]+int64(throttled) != calls || st.Throttled != uint64(throttled) || st.Opens != 0 {
			t.Fatalf("throttling %v: %d sent, %d throttled, of %d; stats %+v", on, hits[on], throttled, calls, st)
		}
	}
	// Without, every call reaches the server; with, the server accepting a fifth
	// of what it gets (below 1/K) is sent a small share: about 1/(0.6 × calls) in
	// steady state, here the first MinRequests calls' too, and what their accepts
	// let through: about an eighth.
	t.Logf("sent %d of %d calls without the throttle, %d with", hits[false], calls, hits[true])
	if hits[false] != calls || hits[true]*3 > calls {
		t.Fatalf("sent %d of %d without the throttle, %d with: want all, and at most a third", hits[false], calls, hits[true])
	}
}

func TestThrottleRefusesSheddableFirst(t *testing.T) {
	// The server sheds by level, as the toolkit's admission does: every sheddable
	// call, half the critical ones (more than the level's own throttle tolerates at
	// K = 2 only by a hair), no critical-plus one.
	srv := newRefuser(t, func(n int64, l criticality.Level) bool {
		switch l {
		case criticality.Sheddable:
			return true
		case criticality.Critical:
			return n%2 == 0
		}
		return false
	})
	b := breaker.New(countOnly)
	client := &http.Client{Transport: b.Transport(nil)}
	defer client.CloseIdleConnections()
	throttled := map[criticality.Level]int{}
	const rounds = 200
	for range rounds {
		for _, l := range []criticality.Level{criticality.Sheddable, criticality.Critical, criticality.CriticalPlus} {
			if _, err := levelled(t, client, srv.URL, l); errors.Is(err, breaker.ErrThrottled) {
				te, _ := breaker.IsThrottled(err)
				if te.Level != l || te.Probability <= 0 {
					t.Fatalf("refusal %+v of a %v call", te, l)
				}
				throttled[l]++
			} else if err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("throttled of %d each: %v", rounds, throttled)
	if throttled[criticality.CriticalPlus] != 0 {
		t.Fatalf("%d critical-plus calls throttled while the server accepts them all", throttled[criticality.CriticalPlus])
	}
	if throttled[criticality.Sheddable] < rounds/2 || throttled[criticality.Critical]*4 > throttled[criticality.Sheddable] {
		t.Fatalf("throttled %v of %d each: want most sheddable calls, and critical ones far less", throttled, rounds)
	}
}

func TestThrottleLeavesADeadServerToTheCircuit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // connections are refused from now on
	b := breaker.New(countOnly)
	client := &http.Client{Transport: b.Transport(nil)}
	for i := range breaker.DefaultConsecutiveFailures {
		_, err := levelled(t, client, url, criticality.Sheddable)
		if err == nil || errors.Is(err, breaker.ErrOpen) || errors.Is(err, breaker.ErrThrottled) {
			t.Fatalf("call %d: %v, want the refused connection", i+1, err)
		}
	}
	if _, err := levelled(t, client, url, criticality.Sheddable); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("after %d refused connections: %v, want the open circuit", breaker.DefaultConsecutiveFailures, err)
	}
	if st := b.Stats(); st.Throttled != 0 || st.Opens != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestThrottleIgnoresRelayedFailures(t *testing.T) {
	srv := newRefuser(t, func(int64, criticality.Level) bool { return true })
	srv.relay = true
	b := breaker.New(countOnly)
	client := &http.Client{Transport: b.Transport(nil)}
	defer client.CloseIdleConnections()
	const calls = 100
	for range calls {
		if code, err := levelled(t, client, srv.URL, criticality.Sheddable); err != nil || code != 503 {
			t.Fatalf("%d %v", code, err)
		}
	}
	target := breaker.TargetName("http", srv.Listener.Addr().String())
	if tl := throttleLevel(t, b, target, criticality.Sheddable); srv.total() != calls || tl.Probability != 0 || tl.Accepts != calls {
		t.Fatalf("%d of %d sent; sheddable throttle %+v", srv.total(), calls, tl)
	}
}

func TestThrottledHTTPCallsAreNotRetried(t *testing.T) {
	srv := newRefuser(t, fourFifths)
	srv.soon = true
	var mu sync.Mutex
	var throttledEvents, retried int
	obs := retry.WithObserver(func(_ context.Context, e retry.Event) {
		if errors.Is(e.Err, breaker.ErrThrottled) {
			mu.Lock()
			throttledEvents++
			if e.Action == retry.Retry {
				retried++
			}
			mu.Unlock()
		}
	})
	client := &http.Client{Transport: deadlinekit.NewTransport(nil,
		deadlinekit.WithBreaker(countOnly), deadlinekit.WithRetry(obs), deadlinekit.Without(deadlinekit.Hedge))}
	defer client.CloseIdleConnections()
	const calls = 200
	throttled := 0
	for range calls {
		code, err := levelled(t, client, srv.URL, criticality.Sheddable)
		switch {
		case errors.Is(err, breaker.ErrThrottled):
			throttled++
		case err != nil || code != 200 && code != 503:
			t.Fatalf("%d %v", code, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d calls: %d sent, %d attempts throttled, %d calls ended throttled", calls, srv.total(), throttledEvents, throttled)
	if throttled == 0 || throttledEvents != throttled || retried != 0 {
		t.Fatalf("%d calls ended throttled, %d throttled attempts, %d of them retried: want every throttled attempt to end its call", throttled, throttledEvents, retried)
	}
}
