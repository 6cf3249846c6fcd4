package retry_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/deadlinekit/deadlinekit/retry"
)

// A GET to a service that is overloaded twice, then answers. Each retry waits the
// backoff out of the call's one deadline and tells the server it is a retry.
func Example() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ok, previous attempts: %s", r.Header.Get("grpc-previous-rpc-attempts"))
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()

	client := &http.Client{Transport: retry.NewTransport(base,
		retry.WithMaxAttempts(3),
		retry.WithObserver(func(_ context.Context, e retry.Event) {
			why := e.Reason
			if why != "" {
				why = " (" + why + ")"
			}
			fmt.Printf("attempt %d: %v%s → %v\n", e.Attempt, e.Verdict, why, e.Action)
		}),
	)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
	// Output:
	// attempt 1: retryable (status 503) → retry
	// attempt 2: retryable (status 503) → retry
	// attempt 3: answered → return
	// 200 ok, previous attempts: 2
}

// Retry n waits Base × 2^(n−1), capped, with symmetric jitter; u places the jitter.
func ExampleBackoff_Delay() {
	b := retry.DefaultBackoff
	for n := 1; n <= 6; n++ {
		fmt.Printf("retry %d: %v–%v\n", n, b.Delay(n, 0), b.Delay(n, 1))
	}
	// Output:
	// retry 1: 16ms–24ms
	// retry 2: 32ms–48ms
	// retry 3: 64ms–96ms
	// retry 4: 128ms–192ms
	// retry 5: 256ms–384ms
	// retry 6: 400ms–500ms
}

// One budget shared by the transports of one client: retries stay within 10% of the
// successes of the last 10 s, plus a floor of 10 retries per second.
func ExampleNewBudget() {
	budget := retry.NewBudget(0.1, 10, 10*time.Second)
	fmt.Println("a new client may retry at once:", budget.Balance(), "retries")

	orders := retry.NewTransport(nil, retry.WithBudget(budget))
	payments := retry.NewTransport(nil, retry.WithBudget(budget), retry.WithIdempotencyKeys(nil))
	_, _ = orders, payments
	// Output: a new client may retry at once: 100 retries
}

// Client side, outermost first: tracing → retry → hedge → propagate → transport.
// Server side: the retry server interceptor enforces the one-layer rule.
func ExampleUnaryClientInterceptor() {
	conn, err := grpc.NewClient("localhost:50051",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(
			retry.UnaryClientInterceptor(
				retry.WithMaxAttempts(3),
				retry.WithAttemptTimeout(200*time.Millisecond),
			),
			// hedge.UnaryClientInterceptor(...), propagate.UnaryClientInterceptor(...)
		),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()

	_ = grpc.NewServer(grpc.ChainUnaryInterceptor(retry.UnaryServerInterceptor()))
}
