package dedup_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/deadlinekit/deadlinekit/dedup"
)

func Example() {
	charges := 0
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge %d created\n", charges)
	})
	srv := httptest.NewServer(dedup.NewMiddleware(dedup.NewMemoryStore())(charge))
	defer srv.Close()

	for range 2 { // the second is a retry whose answer the first lost
		req, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader(`{"amount":100}`))
		req.Header.Set("Idempotency-Key", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d replayed=%q %s", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), body)
	}
	fmt.Println("charges made:", charges)
	// Output:
	// 201 replayed="" charge 1 created
	// 201 replayed="true" charge 1 created
	// charges made: 1
}
