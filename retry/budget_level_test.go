package retry_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/retry"
)

// levelServer answers a GET of /prefetch 503 always, and one of /checkout 503 on
// its first attempt and 200 on its retries: a downstream refusing for load, whose
// critical calls get through on a second try.
type levelServer struct{ checkoutRetries atomic.Int64 }

func (s *levelServer) RoundTrip(r *http.Request) (*http.Response, error) {
	status := http.StatusServiceUnavailable
	if r.URL.Path == "/checkout" && r.Header.Get("Grpc-Previous-Rpc-Attempts") != "" {
		s.checkoutRetries.Add(1)
		status = http.StatusOK
	}
	return &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("x")), Request: r}, nil
}

// get sends a GET of path at level through client and returns its status.
func levelGet(t *testing.T, client *http.Client, path string, level criticality.Level) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(criticality.With(context.Background(), level), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://svc"+path, nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// A client's sheddable retries leave some of its retry budget to its critical
// calls (the design's "criticality is read by the retry budget"; the SRE book's
// rule that a level is refused only once every lower one is): a burst of prefetches
// refused for load spent the whole budget, and the checkout refused once after it
// was not retried, though a retry would have been answered.
func TestBudgetKeepsRetriesForHigherLevels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &levelServer{}
		budget := retry.NewBudget(0.1, 2, 10*time.Second) // a reserve of 20 retries
		client := &http.Client{Transport: retry.NewTransport(s, retry.WithBudget(budget))}
		if got := levelGet(t, client, "/checkout", criticality.Critical); got != http.StatusOK {
			t.Fatalf("first checkout: %d, want 200 after a retry", got)
		}
		for range 40 {
			levelGet(t, client, "/prefetch", criticality.Sheddable)
		}
		if got := levelGet(t, client, "/checkout", criticality.Critical); got != http.StatusOK {
			t.Fatalf("checkout after the prefetches' retries: %d, want 200 after a retry (budget balance %.1f)", got, budget.Balance())
		}
		if n := s.checkoutRetries.Load(); n != 2 {
			t.Fatalf("checkout retries %d, want 2", n)
		}
	})
}

// The headroom is kept only for levels in use: the prefetches' retries stop with
// the critical calls' headroom left while those calls use the budget, and may spend
// it all once no critical call has for the TTL; a client of one level spends it all.
func TestBudgetHeadroomOnlyForLevelsInUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := retry.NewBudget(0, 2, 10*time.Second) // reserve 20, headroom 2
		drain := func(l criticality.Level) int {
			n := 0
			for b.TryWithdrawAt(l) {
				n++
			}
			return n
		}
		if n := drain(criticality.Sheddable); n != 20 {
			t.Fatalf("one level: %d retries, want the whole reserve (20)", n)
		}
		<-time.After(10 * time.Second) // the withdrawals expire
		b.DepositAt(criticality.CriticalPlus)
		b.DepositAt(criticality.Critical)
		if n := drain(criticality.Sheddable); n != 16 {
			t.Fatalf("under two levels in use: %d sheddable retries, want 16 (20 less 2 × 2)", n)
		}
		if n := drain(criticality.Critical); n != 2 {
			t.Fatalf("critical retries after them: %d, want 2 (one level above in use)", n)
		}
		if n := drain(criticality.CriticalPlus); n != 2 {
			t.Fatalf("critical_plus retries after them: %d, want 2", n)
		}
		<-time.After(10 * time.Second) // withdrawals expire, and so does the use of the levels above
		if n := drain(criticality.Sheddable); n != 20 {
			t.Fatalf("levels above unused for the TTL: %d sheddable retries, want 20", n)
		}
	})
}
