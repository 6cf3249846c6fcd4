package breaker_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
)

// backend is a loopback HTTP server whose health the test sets.
type backend struct {
	*httptest.Server
	failing atomic.Bool  // answer 503
	delay   atomic.Int64 // wait this long (or until the request ends) before answering
	hits    atomic.Int64 // requests that reached the handler
	arrived chan struct{}
}

func newBackend(t *testing.T) *backend {
	b := &backend{arrived: make(chan struct{}, 1024)}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		select {
		case b.arrived <- struct{}{}:
		default:
		}
		if b.failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if d := time.Duration(b.delay.Load()); d > 0 {
			timer := time.NewTimer(d)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(b.Close)
	return b
}

// short is a sleep the tests wait out with time.Sleep: exactly 50 ms, no jitter.
var short = breaker.WithSleep(breaker.Sleep{First: 50 * time.Millisecond, Max: 50 * time.Millisecond, Factor: 1})

// waitSleep waits for a short sleep to be over.
func waitSleep() { time.Sleep(60 * time.Millisecond) }

var bg = context.Background()

// get sends a GET to url through client under ctx; it returns the status (0 with an
// error) and the error.
func get(ctx context.Context, client *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func TestHTTPOutageOpensAndRecoveryCloses(t *testing.T) {
	be := newBackend(t)
	b := breaker.New(short, breaker.WithProbes(2))
	client := &http.Client{Transport: b.Transport(nil)}
	defer client.CloseIdleConnections()
	target := breaker.TargetName("http", be.Listener.Addr().String())

	for range 30 {
		if code, err := get(bg, client, be.URL); err != nil || code != 200 {
			t.Fatalf("healthy: %d %v", code, err)
		}
	}
	// The outage: with 30 successes in the window the ratio is 19/49 after 19
	// failures, far below 0.6, but the 20th failure in a row opens it.
	be.failing.Store(true)
	for i := range breaker.DefaultConsecutiveFailures {
		if code, err := get(bg, client, be.URL); err != nil || code != 503 {
			t.Fatalf("failure %d: %d %v, want 503", i+1, code, err)
		}
		if want := i+1 == breaker.DefaultConsecutiveFailures; (b.State(target) == breaker.Open) != want {
			t.Fatalf("after %d failures: %v", i+1, b.State(target))
		}
	}
	hits := be.hits.Load()
	for range 100 {
		_, err := get(bg, client, be.URL)
		var oe *breaker.OpenError
		if !errors.As(err, &oe) || !errors.Is(err, breaker.ErrOpen) || oe.Target != target || oe.RetryAfter <= 0 {
			t.Fatalf("while open: %v", err)
		}
	}
	if got := be.hits.Load(); got != hits {
		t.Fatalf("%d calls reached the server while open", got-hits)
	}

	// A probe finds it still down: open again; nothing else got through.
	waitSleep()
	if code, _ := get(bg, client, be.URL); code != 503 {
		t.Fatalf("probe: %d", code)
	}
	for range 10 {
		if _, err := get(bg, client, be.URL); !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("after a failed probe: %v", err)
		}
	}
	if got := be.hits.Load(); got != hits+1 {
		t.Fatalf("%d calls reached the server, want the one probe", got-hits)
	}

	// Recovery: two probes succeed, the circuit closes, calls flow.
	be.failing.Store(false)
	waitSleep()
	for i := range 50 {
		if code, err := get(bg, client, be.URL); err != nil || code != 200 {
			t.Fatalf("after recovery, call %d: %d %v", i+1, code, err)
		}
	}
	if b.State(target) != breaker.Closed {
		t.Fatalf("after recovery: %v", b.State(target))
	}
	if s := b.Stats(); s.Probes != 3 || s.Opens != 2 || s.Refused != 110 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestHTTPDeadTargetOpensAfterMinCalls(t *testing.T) {
	dead := testkit.ClosedAddr(t)
	healthy := newBackend(t)
	b := breaker.New(breaker.WithOpenFor(time.Minute))
	client := &http.Client{Transport: b.Transport(nil)}
	defer client.CloseIdleConnections()
	for i := range breaker.DefaultMinCalls {
		if _, err := get(bg, client, "http://"+dead); err == nil || errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("call %d to the dead target: %v, want a connection error", i+1, err)
		}
		if code, err := get(bg, client, healthy.URL); err != nil || code != 200 {
			t.Fatalf("healthy, while the other is dying: %d %v", code, err)
		}
	}
	if _, err := get(bg, client, "http://"+dead); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("after %d connection errors: %v, want the circuit open", breaker.DefaultMinCalls, err)
	}
	for range 200 {
		if code, err := get(bg, client, healthy.URL); err != nil || code != 200 {
			t.Fatalf("healthy, next to a dead target: %d %v", code, err)
		}
	}
	if s := b.State(breaker.TargetName("http", healthy.Listener.Addr().String())); s != breaker.Closed {
		t.Fatalf("healthy target: %v", s)
	}
	if s := b.Stats(); s.Targets != 2 {
		t.Fatalf("targets = %d", s.Targets)
	}
}

func TestHTTPCallerCancellationsNeverOpen(t *testing.T) {
	be := newBackend(t)
	be.delay.Store(int64(time.Minute)) // answers only when the caller gives up
	b := breaker.New(breaker.WithMinCalls(5))
	client := &http.Client{Transport: b.Transport(nil)}
	defer client.CloseIdleConnections()
	const n = 300
	// One at a time, so that the request that arrived is the caller's own.
	testkit.Parallel(1, n, func(int) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { _, err := get(ctx, client, be.URL); done <- err }()
		<-be.arrived // a request reached the server: now give up
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled call: %v", err)
		}
	})
	s := b.Stats()
	if s.Neutral != n || s.Failures != 0 || s.Refused != 0 || s.Opens != 0 {
		t.Fatalf("after %d cancellations: %+v", n, s)
	}
}

func TestHTTPStarvedTimeoutsNeverOpenFairOnesDo(t *testing.T) {
	be := newBackend(t)
	be.delay.Store(int64(30 * time.Millisecond))
	b := breaker.New(breaker.WithMinCalls(10))
	client := &http.Client{Transport: b.Transport(nil)}
	defer client.CloseIdleConnections()
	call := func(budget time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		_, err := get(ctx, client, be.URL)
		return err
	}
	testkit.Parallel(5, 20, func(int) { // the target's typical latency: 30 ms
		if err := call(5 * time.Second); err != nil {
			t.Error(err)
		}
	})
	// The starved calls' answers never come: on a loaded machine a 3 ms deadline's
	// timer can fire after a 30 ms answer has arrived, and the call would succeed.
	be.delay.Store(int64(time.Minute))
	const n = 300
	// Budgets below it: the callers' fault. The target stalls meanwhile, so that a
	// starved call ends at its own deadline however late a loaded machine runs the
	// caller's 3 ms timer (against a 30 ms answer, a timer 27 ms late got the answer).
	be.delay.Store(int64(time.Minute))
	testkit.Parallel(20, n, func(int) {
		if err := call(3 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("starved call: %v", err)
		}
	})
	if s := b.Stats(); s.Neutral != n || s.Failures != 0 || s.Opens != 0 {
		t.Fatalf("after %d starved timeouts: %+v", n, s)
	}
	// The control: the target hangs, and calls with a fair budget (more than three
	// times its typical latency) time out: those are failures. With the warm-up's 20
	// successes in the window, 31 of them open the circuit (31/51 > 0.6).
	testkit.Parallel(31, 31, func(int) {
		if err := call(100 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, breaker.ErrOpen) {
			t.Errorf("fair call: %v", err)
		}
	})
	if err := call(100 * time.Millisecond); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("after 31 fair timeouts: %v, want the circuit open (%+v)", err, b.Stats())
	}
}

func TestHTTPConcurrentCallers(t *testing.T) {
	good, bad := newBackend(t), newBackend(t)
	bad.failing.Store(true)
	b := breaker.New(short)
	client := &http.Client{Transport: b.Transport(&http.Transport{MaxIdleConnsPerHost: 200})}
	defer client.CloseIdleConnections()
	var goodOK, badSent, badRefused atomic.Int64
	testkit.Parallel(200, 200*20, func(i int) {
		if i%2 == 0 {
			if code, err := get(bg, client, good.URL); err != nil || code != 200 {
				t.Errorf("healthy: %d %v", code, err)
				return
			}
			goodOK.Add(1)
			return
		}
		code, err := get(bg, client, bad.URL)
		switch {
		case errors.Is(err, breaker.ErrOpen):
			badRefused.Add(1)
		case err == nil && code == 503:
			badSent.Add(1)
		default:
			t.Errorf("failing target: %d %v", code, err)
		}
	})
	s := b.Stats()
	if goodOK.Load() != 2000 || badSent.Load()+badRefused.Load() != 2000 {
		t.Fatalf("good %d, bad sent %d refused %d", goodOK.Load(), badSent.Load(), badRefused.Load())
	}
	if s.Successes != 2000 || s.Failures != uint64(badSent.Load()) || s.Refused != uint64(badRefused.Load()) || badSent.Load() != bad.hits.Load() {
		t.Fatalf("stats %+v disagree with the callers (bad sent %d, reached %d)", s, badSent.Load(), bad.hits.Load())
	}
	if badRefused.Load() == 0 {
		t.Fatal("the failing target's circuit never opened")
	}
}

func TestHTTPRefusalClosesTheBody(t *testing.T) {
	b := breaker.New(breaker.WithMinCalls(1))
	rt := b.Transport(testkit.RoundTripFunc(func(*http.Request) (*http.Response, error) { return nil, io.ErrUnexpectedEOF }))
	req, _ := http.NewRequest("POST", "http://x.test/", nil)
	_, _ = rt.RoundTrip(req)
	body := &closeBody{}
	req, _ = http.NewRequest("POST", "http://x.test/", body)
	resp, err := rt.RoundTrip(req)
	if resp != nil || !errors.Is(err, breaker.ErrOpen) || !body.closed {
		t.Fatalf("refused: %v %v, body closed %v", resp, err, body.closed)
	}
}

type closeBody struct{ closed bool }

func (b *closeBody) Read([]byte) (int, error) { return 0, io.EOF }
func (b *closeBody) Close() error             { b.closed = true; return nil }
