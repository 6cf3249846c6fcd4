package breaker_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/deadlinekit/deadlinekit/breaker"
)

func Example() {
	// A downstream that is down: every answer is 503.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	b := breaker.New(breaker.WithMinCalls(5), breaker.WithOpenFor(time.Minute))
	client := &http.Client{Transport: b.Transport(nil)}
	sent, refused := 0, 0
	for range 20 {
		resp, err := client.Get(srv.URL)
		switch {
		case errors.Is(err, breaker.ErrOpen):
			refused++
		case err == nil:
			sent++
			resp.Body.Close()
		}
	}
	fmt.Println("sent:", sent, "refused:", refused, "state:", b.Circuits()[0].State)
	// Output: sent: 5 refused: 15 state: open
}

func ExampleThrottle_Probability() {
	t := breaker.DefaultThrottle                 // K = 2
	fmt.Printf("%.2f\n", t.Probability(100, 60)) // accepts more than 1/K of the requests
	fmt.Printf("%.2f\n", t.Probability(100, 20)) // accepts a fifth
	fmt.Printf("%.2f\n", t.Probability(100, 0))  // refuses everything
	fmt.Println(t.Reject(100, 20, 0.5), t.Reject(100, 20, 0.7))
	// Output:
	// 0.00
	// 0.59
	// 0.99
	// true false
}
