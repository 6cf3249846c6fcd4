package reliability_test

import (
	"context"
	"errors"
	"flag"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
)

var (
	loadFlag    = flag.Duration("reliability.load", 0, "how long TestLoad runs (default 5s; 1s with -short, 2s under -race)")
	callersFlag = flag.Int("reliability.callers", 256, "concurrent callers of TestLoad")
)

// loadDuration is the length of TestLoad: the flag, else 5 s, or 1 s with -short,
// 2 s under the race detector.
func loadDuration() time.Duration {
	switch {
	case *loadFlag > 0:
		return *loadFlag
	case testing.Short():
		return time.Second
	case raceEnabled:
		return 2 * time.Second
	}
	return 5 * time.Second
}

// shiftingBackend alternates phases of phase length: fast (0.5–1.5 ms) and 10×
// slower (5–15 ms). In both, a share of the requests (fail) is answered 503 at once.
type shiftingBackend struct {
	start time.Time
	phase time.Duration
	fail  float64

	requests, failures, slow atomic.Int64
}

func (b *shiftingBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	b.requests.Add(1)
	if rand.Float64() < b.fail {
		b.failures.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	base := time.Millisecond
	if (time.Since(b.start)/b.phase)%2 == 1 {
		base = 10 * time.Millisecond
		b.slow.Add(1)
	}
	timer := time.NewTimer(base/2 + rand.N(base))
	defer timer.Stop()
	select {
	case <-timer.C:
		_, _ = io.WriteString(w, "ok")
	case <-r.Context().Done():
		w.WriteHeader(http.StatusGatewayTimeout)
	}
}

// TestLoad runs 256 callers (-reliability.callers) for 5 s (-reliability.load; 1 s
// with -short, 2 s under -race) through retry → hedge → propagate → net/http against a backend that
// alternates 500 ms phases of fast and 10× slower answers and fails 30% of requests
// with 503 (retryable for GET). Both the hedges (503s fire one at once, and the slow
// phases outlast the fast phases' P99) and the retries want far more than their caps,
// so the caps are what bound them:
//
//   - hedges ≤ 0.15 × primaries + 10 (hedge.Burst), from the Hedger's counters;
//   - retries ≤ 0.1 × successes + 10/s × TTL, counted from the retry layer's
//     observer. The budget's TTL is made to cover the whole run (10 s, or longer for
//     a long run), so the run is one budget window and the bound is exact. A retry
//     counts once it was sent: a retry decided but never sent (its caller's
//     context ended during the backoff, or a layer beneath refused it for lack of
//     budget) gives its token back, and on a loaded machine there are more of them.
//
// Both bounds are checked exactly, and the rates are reported: hedges / primaries
// and retries / successes must stay within 1 percentage point of 15% and 10% once
// the reserves are amortised. Run it under -race too.
func TestLoad(t *testing.T) {
	d := loadDuration()
	callers := max(*callersFlag, 1)
	const (
		hedgeShare  = hedge.DefaultMaxExtraLoad
		retryRatio  = 0.1 // retry's default budget: 10% of the successes,
		retryPerSec = 10  // plus 10 retries per second, over 10 s
	)
	// The whole run, and the calls that end up to 1 s after it, fit in one TTL.
	ttl := max(10*time.Second, ((d+2*time.Second)*10/9).Truncate(time.Second)+time.Second)
	floor := retryPerSec * ttl.Seconds()

	backend := &shiftingBackend{start: time.Now(), phase: 500 * time.Millisecond, fail: 0.3}
	srv := startHTTPServer(t, "", propagate.NewMiddleware()(backend), 0, true)
	defer srv.kill()
	url := "http://" + srv.addr()

	var successes, retries, sentRetries, refused atomic.Int64
	budget := retry.NewBudget(retryRatio, retryPerSec, ttl)
	stack := newHTTPStack(newBaseTransport(),
		[]hedge.Option{hedge.WithMaxExtraLoad(hedgeShare), hedge.WithDelay(hedge.Delay{Window: 2 * time.Second, Buckets: 4})},
		retry.WithBudget(budget),
		retry.WithMaxAttempts(3),
		retry.WithBackoff(retry.Backoff{Base: time.Millisecond, Max: 10 * time.Millisecond, Jitter: 0.2}),
		retry.WithObserver(func(_ context.Context, e retry.Event) {
			// A retry that was sent ends with an event of its own; one refused beneath
			// before sending was given its token back.
			if e.Attempt > 1 && !errors.As(e.Err, new(*deadline.BudgetError)) {
				sentRetries.Add(1)
			}
			switch {
			case e.Verdict == retry.Answered:
				successes.Add(1)
			case e.Action == retry.Retry:
				retries.Add(1)
			case e.Action == retry.Stop && errors.Is(e.Err, retry.ErrBudgetExhausted):
				refused.Add(1)
			}
		}))
	defer stack.base.CloseIdleConnections()

	var mu sync.Mutex
	outcomes := map[string]int{}
	var calls atomic.Int64
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			local := map[string]int{}
			defer func() {
				mu.Lock()
				for k, v := range local {
					outcomes[k] += v
				}
				mu.Unlock()
			}()
			// Bounded by time, and by count in case the clock misbehaves.
			for i := 0; i < 10_000_000 && time.Now().Before(end); i++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				code, err := doHTTP(ctx, stack.client, http.MethodGet, url, "", nil)
				cancel()
				calls.Add(1)
				switch {
				case err != nil:
					local[errKind(err)]++
				case code == http.StatusOK:
					local["ok"]++
				default:
					local[http.StatusText(code)]++
				}
			}
			_ = c
		})
	}
	wg.Wait()
	took := time.Since(start)

	st := stack.hedger.Stats()
	s, r, decided := successes.Load(), sentRetries.Load(), retries.Load()
	t.Logf("%d callers for %v: %d calls (%.0f/s), outcomes %v", callers, took.Round(time.Millisecond), calls.Load(), float64(calls.Load())/took.Seconds(), outcomes)
	t.Logf("backend: %d requests, %d answered 503, %d in slow phases", backend.requests.Load(), backend.failures.Load(), backend.slow.Load())

	// The hedge cap.
	hedgeBound := hedgeShare*float64(st.Primaries) + hedge.Burst
	hedgeRate := float64(st.Hedges) / float64(max(st.Primaries, 1))
	t.Logf("hedge cap: %d hedges for %d primaries = %.3f%% (setting %.0f%% + %d reserve: bound %.0f, the reserve amortised adds %.3f pp); %d refused by the cap, %d won",
		st.Hedges, st.Primaries, 100*hedgeRate, 100*hedgeShare, hedge.Burst, hedgeBound,
		100*hedge.Burst/float64(max(st.Primaries, 1)), st.RefusedByCap, st.HedgeWins)
	if float64(st.Hedges) > hedgeBound {
		t.Errorf("%d hedges > %.0f = %.2f × %d primaries + %d", st.Hedges, hedgeBound, hedgeShare, st.Primaries, hedge.Burst)
	}
	if st.Primaries >= 100*hedge.Burst && hedgeRate > hedgeShare+0.01 {
		t.Errorf("hedge rate %.3f%% exceeds %.0f%% by more than 1 percentage point", 100*hedgeRate, 100*hedgeShare)
	}
	if st.RefusedByCap == 0 {
		t.Logf("note: the cap refused no hedge; the run did not press on it")
	}

	// The retry budget.
	retryBound := retryRatio*float64(s) + floor
	retryRate := float64(r) / float64(max(s, 1))
	t.Logf("retry budget: %d retries sent (%d decided) for %d successes = %.3f%% (setting %.0f%% + %.0f/s × %v = %.0f floor: bound %.0f, the floor amortised adds %.3f pp); %d retries refused by the budget",
		r, decided, s, 100*retryRate, 100*retryRatio, float64(retryPerSec), ttl, floor, retryBound, 100*floor/float64(max(s, 1)), refused.Load())
	if float64(r) > retryBound+1e-9 {
		t.Errorf("%d retries > %.1f = %.2f × %d successes + %.0f", r, retryBound, retryRatio, s, floor)
	}
	if float64(s) >= 100*floor && retryRate > retryRatio+0.01 {
		t.Errorf("retry rate %.3f%% exceeds %.0f%% by more than 1 percentage point", 100*retryRate, 100*retryRatio)
	}
	if refused.Load() == 0 {
		t.Logf("note: the budget refused no retry; the run did not press on it")
	}
}
