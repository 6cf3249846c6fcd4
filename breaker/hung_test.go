package breaker_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// inProcess serves each request with h on the caller's goroutine's context (its
// deadline is the server's), as a transport would: the caller's deadline ends the
// call with its error, whatever h still does.
type inProcess struct{ h http.Handler }

func (p inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.h.ServeHTTP(rec, r)
	}()
	select {
	case <-done:
		resp := rec.Result()
		resp.Request = r
		return resp, nil
	case <-r.Context().Done():
		<-done
		return nil, r.Context().Err()
	}
}

// A target whose handler hangs (a deadlock, a dependency blackholed) behind the
// toolkit's guard still answers at once the calls that come with less time than the
// floor it learned: 504 with "do not retry", a refusal for lack of budget. Such a
// refusal of a call whose budget was below the target's typical latency is the
// caller's short budget, not the target shedding load: the timeouts of the calls
// with a fair budget are its failures, and the circuit opens, as for a target that
// answers nothing.
func TestHungTargetRefusingShortBudgetsOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hung atomic.Bool
		h := shortcircuit.NewMiddleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if hung.Load() {
				<-r.Context().Done()
				return
			}
			time.Sleep(10 * time.Millisecond) // the work
		}))
		b := breaker.New()
		client := &http.Client{Transport: b.Transport(inProcess{h})}
		call := func(budget time.Duration) (int, error) {
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://hung.test/", nil)
			resp, err := client.Do(req)
			if err != nil {
				return 0, err
			}
			resp.Body.Close()
			return resp.StatusCode, nil
		}
		for range 30 { // the guard learns its floor (10 ms), the circuit the typical latency
			if code, err := call(time.Second); code != http.StatusOK {
				t.Fatal(code, err)
			}
		}
		if code, err := call(5 * time.Millisecond); code != http.StatusGatewayTimeout {
			t.Fatalf("a call with less than the floor: %d %v, want the guard's 504", code, err)
		}
		hung.Store(true)
		// Twice the consecutive failures that open the circuit, in 8 s: within
		// the guard's window, which keeps the floor it learned.
		for i := range 2 * breaker.DefaultConsecutiveFailures {
			long := make(chan error, 1)
			go func() { _, err := call(200 * time.Millisecond); long <- err }()
			time.Sleep(time.Millisecond)
			code, err := call(5 * time.Millisecond) // refused at once, its budget short
			lerr := <-long
			if errors.Is(err, breaker.ErrOpen) {
				return // the circuit opened
			}
			if code != http.StatusGatewayTimeout {
				t.Fatalf("short call %d: %d %v, want the guard's 504", i+1, code, err)
			}
			if !errors.Is(lerr, context.DeadlineExceeded) {
				t.Fatalf("long call %d: %v, want its deadline exceeded", i+1, lerr)
			}
		}
		t.Fatalf("%d timeouts of a hung target, each beside a refusal of a short budget: the circuit stayed closed (%+v)",
			2*breaker.DefaultConsecutiveFailures, b.Stats())
	})
}

// scripted answers /ok after 10 ms of work, /refuse at once with a guard's
// refusal for lack of budget (504, grpc-retry-pushback-ms: -1), and /hang never.
type scripted struct{}

func (scripted) RoundTrip(r *http.Request) (*http.Response, error) {
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}
	switch r.URL.Path {
	case "/ok":
		time.Sleep(10 * time.Millisecond)
	case "/refuse":
		resp.StatusCode = http.StatusGatewayTimeout
		resp.Header.Set(pushback.Key, pushback.DoNotRetry)
	case "/hang":
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	return resp, nil
}

// A refusal for lack of budget, beside a timeout, says the target was shedding
// when the refused call had at least the target's typical latency to spend (the
// guard could not fit it among the calls it holds), and says nothing when it had
// less (any guard refuses that, a hung target's too).
func TestSheddingSinceWeighsTheRefusedCallsBudget(t *testing.T) {
	for _, c := range []struct {
		budget   time.Duration // of the refused call; the target's typical latency is 10 ms
		shedding bool
	}{{50 * time.Millisecond, true}, {5 * time.Millisecond, false}} {
		synctest.Test(t, func(t *testing.T) {
			var shedding atomic.Int32 // of the hung call: 1 false, 2 true
			b := breaker.New(breaker.WithClassifier(func(r breaker.Result) breaker.Outcome {
				if r.Method == http.MethodPost {
					shedding.Store(1 + boolInt(r.SheddingSince))
				}
				return breaker.Classify(r)
			}))
			client := &http.Client{Transport: b.Transport(scripted{})}
			call := func(method, path string, budget time.Duration) {
				ctx, cancel := context.WithTimeout(context.Background(), budget)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, method, "http://t.test"+path, nil)
				if resp, err := client.Do(req); err == nil {
					resp.Body.Close()
				}
			}
			for range 20 {
				call(http.MethodGet, "/ok", time.Second)
			}
			hung := make(chan struct{})
			go func() { defer close(hung); call(http.MethodPost, "/hang", 200*time.Millisecond) }()
			time.Sleep(time.Millisecond)
			call(http.MethodGet, "/refuse", c.budget)
			<-hung
			if shedding.Load() == 0 {
				t.Fatal("the hung call was not classified")
			}
			if got := shedding.Load() == 2; got != c.shedding {
				t.Fatalf("a refusal of a call with %v, typical 10 ms: the timeout's SheddingSince %v, want %v", c.budget, got, c.shedding)
			}
		})
	}
}

func boolInt(b bool) int32 {
	if b {
		return 1
	}
	return 0
}
