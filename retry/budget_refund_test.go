package retry_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/retry"
)

// pushbackServer answers every request 503 with a Retry-After of its seconds: an
// overloaded downstream telling its clients when to come back.
type pushbackServer struct{ retryAfter string }

func (s pushbackServer) RoundTrip(r *http.Request) (*http.Response, error) {
	h := http.Header{"Retry-After": {s.retryAfter}}
	return &http.Response{StatusCode: http.StatusServiceUnavailable, Header: h, Body: io.NopCloser(strings.NewReader("busy")), Request: r}, nil
}

// cancelDuringWait sends n GETs through client at once, each canceled by its caller
// after cancelAfter, while the layer waits for the server's pushback, and returns
// when they have all returned.
func cancelDuringWait(client *http.Client, n int, cancelAfter time.Duration) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			time.AfterFunc(cancelAfter, cancel)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://svc/", nil)
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
}

// A retry that is never sent gives back the token it took, and only that: the
// token goes back to the slice of the TTL it was taken from, and expires with it.
// It went to the slice of the moment it was given back: a caller who gave up during
// a server's pushback longer than the TTL handed the budget a token that it had
// never lost (the withdrawal had expired already), and one who gave up a slice
// later kept the budget a token over its balance for that slice; an overloaded
// downstream asking its clients to come back later, and callers giving up, thus
// let the client retry beyond its budget.
func TestBudgetRefundGoesBackWhereTheTokenWasTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget := retry.NewBudget(0, 1, 10*time.Second) // a reserve of 10 retries, slices of 1 s
		long := &http.Client{Transport: retry.NewTransport(pushbackServer{"15"}, retry.WithBudget(budget))}
		cancelDuringWait(long, 5, 12*time.Second) // tokens taken at 0 s, expired by 10 s, given up at 12 s
		if got := budget.Balance(); got != 10 {
			t.Errorf("after 5 retries given up past the TTL: balance %v, want the reserve (10): their withdrawals had expired", got)
		}

		<-time.After(20*time.Second - 50*time.Millisecond) // a TTL later, 50 ms before a slice ends
		short := &http.Client{Transport: retry.NewTransport(pushbackServer{"1"}, retry.WithBudget(budget))}
		cancelDuringWait(short, 3, 100*time.Millisecond) // taken in one slice, given up in the next
		if got := budget.Balance(); got != 10 {
			t.Errorf("after 3 retries given up: balance %v, want 10", got)
		}
		<-time.After(9*time.Second + 450*time.Millisecond) // the slice of the withdrawals has expired, not the next one
		if got := budget.Balance(); got != 10 {
			t.Errorf("once the slice the tokens were taken from expired: balance %v, want the reserve (10)", got)
		}
	})
}

// A retry whose request body cannot be replayed (the request's GetBody fails) is
// not sent, and gives its token back: the call stops, having spent none. The token
// was kept.
func TestBudgetRetryNotReplayableGivesItsTokenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget := retry.NewBudget(0, 1, 10*time.Second) // a reserve of 10 retries
		base := &fakeRT{fn: always(http.StatusServiceUnavailable)}
		req, _ := http.NewRequest(http.MethodPut, "http://svc/doc", strings.NewReader("v2"))
		req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("the document was closed") }
		resp, err := retry.NewTransport(base, retry.WithBudget(budget)).RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		if got := base.attempts(); got != 1 || budget.Balance() != 10 {
			t.Errorf("%d attempts sent, %v tokens left; want 1 and the reserve (10): the retry never left", got, budget.Balance())
		}
	})
}
