package deadlinekit_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
)

// A circuit that opened on a dead target lets its next probes through to as many
// calls as it has probes. Calls refused while it is open are told to come back for
// them only as far as there are probes to give: the others fail at once, their
// budget whole for the caller's next move (another replica). Before, every caller
// whose deadline came after the probe waited for it, and all but the probes were
// refused again at its instant, their budget spent (a new user's payments trial:
// 57 of 1,500 payments waited 3 s for a probe of the replica killed under them,
// and failed).
func TestAnOpenCircuitsProbeIsNotWaitedForByEveryCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var up atomic.Bool
		base := testkit.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
			if !up.Load() {
				return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
			}
			select {
			case <-time.After(50 * time.Millisecond):
				return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
			case <-req.Context().Done():
				return nil, req.Context().Err()
			}
		})
		client := &http.Client{Transport: deadlinekit.NewTransport(base)}
		get := func(budget time.Duration) error {
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://replica-1.test/item", nil)
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			return err
		}

		// The target dies: its calls fail until the circuit opens.
		var open *breaker.OpenError
		for range 200 {
			if err := get(100 * time.Millisecond); errors.As(err, &open) {
				break
			}
			<-time.After(10 * time.Millisecond) // on the bubble's clock
		}
		if open == nil {
			t.Fatal("the circuit never opened")
		}
		probeAt := time.Now().Add(open.RetryAfter)
		up.Store(true) // the replica is back; the circuit does not know yet

		// 20 callers, each with 3 s, when the next probe is 2.9 s away.
		<-time.After(time.Until(probeAt.Add(-2900 * time.Millisecond)))
		const callers = 20
		var mu sync.Mutex
		var ok, failedFast, failedLate int
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				start := time.Now()
				err := get(3 * time.Second)
				took := time.Since(start)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok++
				case took < time.Second:
					failedFast++
				default:
					failedLate++
					t.Logf("failed after %v: %v", took, err)
				}
			})
		}
		wg.Wait()
		if failedLate > 0 || ok != breaker.DefaultProbes {
			t.Errorf("%d callers answered, %d failed at once, %d failed after waiting; want %d answered (the probes) and none failed after waiting",
				ok, failedFast, failedLate, breaker.DefaultProbes)
		}
	})
}
