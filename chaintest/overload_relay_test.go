package chaintest_test

import (
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/retry"
)

// overloadedInventory answers as a guard does when its queue is full: 503, "come
// back in" 20 ms (Retry-After rounded up to whole seconds, and the milliseconds in
// grpc-retry-pushback-ms), and "the handler did not run".
func overloadedInventory(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Retry-After", "1")
	w.Header().Set("Grpc-Retry-Pushback-Ms", "20")
	w.Header().Set("Deadlinekit-Unprocessed", "1")
	http.Error(w, "inventory: overloaded, come back in 20ms", http.StatusServiceUnavailable)
}

// An overloaded downstream's "come back in" reaches the user as the same answer, a
// 503 with Retry-After, however the hop above it ended its retries: after all its
// attempts (the last attempt's status, unchanged), because its retry budget was
// spent, or because its throttle (on by default) refused a retry locally, the
// downstream having refused all it was sent. And no hop above retries it again.
func TestChainRelaysOverloadAsOverload(t *testing.T) {
	noThrottle := deadlinekit.WithBreaker(breaker.WithoutAdaptiveThrottling())
	for _, c := range []struct {
		name                     string
		opts                     []deadlinekit.Option
		minInvCalls, maxInvCalls int32 // inventory's calls, at least and at most
	}{
		{"attempts exhausted", []deadlinekit.Option{noThrottle}, 3, 3},
		{"retry budget spent", []deadlinekit.Option{noThrottle, deadlinekit.WithRetry(retry.WithBudget(retry.NewBudget(0, 0, time.Second)))}, 1, 1},
		// The first attempt is always sent (nothing in the window), each retry
		// with probability 1/2, then 1/3: at random.
		{"defaults: attempts exhausted or a retry throttled", nil, 1, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newShopClient(t, overloadedInventory, c.opts)
			resp := s.do(t, http.MethodPost, "/order")
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("the user got %d; want 503, inventory's overload relayed", resp.StatusCode)
			}
			if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
				t.Errorf("the user got Retry-After %q; want inventory's come back in (1 s, rounded up)", resp.Header.Get("Retry-After"))
			}
			if tr := <-s.ordersTr; len(tr.Get("grpc-retry-pushback-ms")) != 1 || tr.Get("grpc-retry-pushback-ms")[0] != "-1" {
				t.Errorf("orders' trailer grpc-retry-pushback-ms %q; want one -1: its retry layer gave up, so nobody above retries", tr.Get("grpc-retry-pushback-ms"))
			}
			if n := s.invRun.Load(); n < c.minInvCalls || n > c.maxInvCalls {
				t.Errorf("inventory was called %d times; want %d to %d (orders' retry layer only)", n, c.minInvCalls, c.maxInvCalls)
			}
			if n := s.ordersRun.Load(); n != 1 {
				t.Errorf("orders ran %d times; want 1", n)
			}
			io.Copy(io.Discard, resp.Body)
		})
	}
}
