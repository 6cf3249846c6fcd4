package reliability_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
)

// latencyHeader asks the tail server for a given latency (a time.Duration string)
// instead of drawing one.
const latencyHeader = "X-Reliability-Latency"

// tailHandler is a backend with a heavy tail and some failures. Each request, unless
// it asks for a latency, draws: 3% answer 503 at once (with a body, which the layers
// above must drain), 1% read the request and reset the connection; the others wait
// 0–0.5 ms (85%), 2–5 ms (12%), 10–30 ms (2.5%) or 100–300 ms (0.5%), cut short with
// a 504 when the request's context ends, except 0.5% that ignore it (a loser's answer then
// arrives after the winner's).
type tailHandler struct {
	requests, unavailable, resets, cut atomic.Int64
}

var tailBody = strings.Repeat("x", 8<<10)

func (h *tailHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.requests.Add(1)
	_, _ = io.Copy(io.Discard, r.Body)
	var d time.Duration
	if v := r.Header.Get(latencyHeader); v != "" {
		d, _ = time.ParseDuration(v)
	} else {
		switch u := rand.Float64(); {
		case u < 0.03:
			h.unavailable.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, tailBody[:2<<10])
			return
		case u < 0.04:
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				h.resets.Add(1)
				resetConn(c)
				return
			}
		}
		switch v := rand.Float64(); {
		case v < 0.85:
			d = rand.N(500 * time.Microsecond)
		case v < 0.97:
			d = 2*time.Millisecond + rand.N(3*time.Millisecond)
		case v < 0.995:
			d = 10*time.Millisecond + rand.N(20*time.Millisecond)
		default:
			d = 100*time.Millisecond + rand.N(200*time.Millisecond)
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	if rand.Float64() < 0.005 {
		<-timer.C
	} else {
		select {
		case <-timer.C:
		case <-r.Context().Done():
			h.cut.Add(1)
			w.WriteHeader(http.StatusGatewayTimeout)
			return
		}
	}
	_, _ = io.WriteString(w, tailBody[:1<<10+rand.IntN(7<<10)])
}

// TestLeakHedgedRetriedHTTP makes 10,000 calls through retry → hedge → propagate →
// net/http against the tail server, 64 at a time. Every 10th call is cancelled by its
// caller mid-flight (the server holds it 50 ms, the caller cancels after 1–4 ms),
// every 10th runs out of its deadline mid-flight (5 ms against 50 ms), every 20th
// closes the response body without reading it; hedges go out after 2 ms (up to 2 per
// call, 50% extra load allowed) so that many losers are cancelled, and retries follow
// 503s and resets. Afterwards, with the client's idle connections closed, the
// server holds no connection and the goroutines are back to their count before the
// first call; with the server closed, back to the count before the test, and goleak
// finds nothing.
func TestLeakHedgedRetriedHTTP(t *testing.T) {
	const calls, workers = 10_000, 64
	g0 := runtime.NumGoroutine()

	backend := &tailHandler{}
	srv := startHTTPServer(t, "", propagate.NewMiddleware()(backend), 0, true)
	url := "http://" + srv.addr()

	var retries, stops atomic.Int64
	stack := newHTTPStack(newBaseTransport(),
		[]hedge.Option{hedge.WithDelay(hedge.Delay{Initial: 2 * time.Millisecond, MinSamples: 200}),
			hedge.WithMaxAttempts(3), hedge.WithMaxExtraLoad(0.5)},
		retry.WithMaxAttempts(3),
		retry.WithBackoff(retry.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond, Jitter: 0.2}),
		retry.WithIdempotencyKeys(nil),
		retry.WithObserver(func(_ context.Context, e retry.Event) {
			switch e.Action {
			case retry.Retry:
				retries.Add(1)
			case retry.Stop:
				stops.Add(1)
			}
		}))
	g1 := runtime.NumGoroutine() // the server is up, no call made yet

	// Peaks, sampled while the calls run.
	var peakG atomic.Int64
	sampled := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
				peakG.Store(max(peakG.Load(), int64(runtime.NumGoroutine())))
			}
		}
	}()

	// The whole run is bounded: every call derives from run.
	run, endRun := context.WithTimeout(context.Background(), 2*time.Minute)
	defer endRun()
	var mu sync.Mutex
	outcomes := map[string]int{}
	var callerCanceled, deadlineCut atomic.Int64
	start := time.Now()
	testkit.Parallel(workers, calls, func(i int) {
		var (
			ctx    context.Context
			cancel context.CancelFunc
			hdr    = http.Header{}
		)
		switch i % 10 {
		case 7: // cancelled by the caller mid-flight
			ctx, cancel = context.WithCancel(run)
			hdr.Set(latencyHeader, "50ms")
			stop := time.AfterFunc(time.Millisecond+rand.N(3*time.Millisecond), cancel)
			defer stop.Stop()
		case 8: // the deadline ends it mid-flight
			ctx, cancel = context.WithTimeout(run, 5*time.Millisecond)
			hdr.Set(latencyHeader, "50ms")
		default:
			ctx, cancel = context.WithTimeout(run, 500*time.Millisecond)
		}
		defer cancel()
		method := [...]string{http.MethodGet, http.MethodGet, http.MethodGet, http.MethodPut, http.MethodPost}[i%5]
		var body io.Reader
		if method != http.MethodGet {
			body = strings.NewReader("payload")
		}
		req, _ := http.NewRequestWithContext(ctx, method, url, body)
		for k, v := range hdr {
			req.Header[k] = v
		}
		resp, err := stack.client.Do(req)
		kind := errKind(err)
		if err == nil {
			if i%20 == 9 {
				kind = "body closed unread"
			} else if _, rerr := io.Copy(io.Discard, resp.Body); rerr != nil {
				kind = "body: " + errKind(rerr)
			} else if resp.StatusCode != http.StatusOK {
				kind = "status " + http.StatusText(resp.StatusCode)
			}
			resp.Body.Close()
		}
		switch {
		case errors.Is(err, context.Canceled):
			callerCanceled.Add(1)
		case errors.Is(err, context.DeadlineExceeded) && i%10 == 8:
			deadlineCut.Add(1)
		}
		mu.Lock()
		outcomes[kind]++
		mu.Unlock()
	})
	took := time.Since(start)
	close(stopSampling)
	<-sampled
	if run.Err() != nil {
		t.Fatalf("the 10,000 calls did not end within the run's bound: %v", run.Err())
	}

	st := stack.hedger.Stats()
	t.Logf("%d calls in %v (%d at a time): outcomes %v", calls, took.Round(time.Millisecond), workers, outcomes)
	t.Logf("cancelled by their caller: %d; cut by their deadline: %d; retries %d, retry stops %d", callerCanceled.Load(), deadlineCut.Load(), retries.Load(), stops.Load())
	t.Logf("hedger: %d primaries, %d hedges (%d won, %d refused by the cap); server: %d requests, %d answered 503, %d reset, %d cut by their context",
		st.Primaries, st.Hedges, st.HedgeWins, st.RefusedByCap, backend.requests.Load(), backend.unavailable.Load(), backend.resets.Load(), backend.cut.Load())
	t.Logf("server connections: %d accepted, peak %d open; goroutines: %d before the test, %d with the server up, peak %d during the calls",
		srv.lis.accepted.Load(), srv.lis.peakConns(), g0, g1, peakG.Load())
	if st.Hedges == 0 || callerCanceled.Load() == 0 || retries.Load() == 0 {
		t.Errorf("the run did not exercise what it is for: %d hedges, %d calls cancelled, %d retries", st.Hedges, callerCanceled.Load(), retries.Load())
	}

	// Connections: with the client's idle connections closed, the server holds none.
	// A loser still draining returns its connection to the pool up to 100 ms after its
	// call ended, hence the repeated CloseIdleConnections.
	if !waitUntil(t, stack.base.CloseIdleConnections, func() bool { return srv.lis.openConns() == 0 }) {
		t.Errorf("%d server connections still open after CloseIdleConnections (started with 0)", srv.lis.openConns())
	} else {
		t.Logf("server connections after CloseIdleConnections: 0 (started with 0)")
	}
	// Goroutines: back to their count before the first call, the server still up.
	if !waitUntil(t, nil, func() bool { return runtime.NumGoroutine() <= g1 }) {
		t.Errorf("%d goroutines after the calls, %d before the first call", runtime.NumGoroutine(), g1)
	} else {
		t.Logf("goroutines after the calls: %d (%d before the first call)", runtime.NumGoroutine(), g1)
	}

	srv.kill()
	if !waitUntil(t, nil, func() bool { return runtime.NumGoroutine() <= g0 }) {
		t.Errorf("%d goroutines after the server closed, %d before the test", runtime.NumGoroutine(), g0)
	}
	goleak.VerifyNone(t)
}
