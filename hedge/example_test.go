package hedge_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/propagate"
)

// A backend whose first copy of each request is stuck: the hedge, sent once the
// call has taken longer than the delay, answers instead. propagate's transport,
// beneath, gives each attempt the time left when it is sent.
func Example() {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempt := r.Header.Get("Grpc-Previous-Rpc-Attempts")
		if attempt == "" {
			select { // the primary: a replica pausing
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
			}
			return
		}
		fmt.Fprintf(w, "hedge after %s attempt(s), with a deadline: %v", attempt, r.Header.Get("Grpc-Timeout") != "")
	}))
	defer backend.Close()

	// A real client learns the delay from its calls (P99 after 100 of them); this
	// one starts with 50 ms.
	h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: 50 * time.Millisecond}))
	client := &http.Client{Transport: h.Transport(propagate.NewTransport(nil))}
	defer client.CloseIdleConnections()

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, backend.URL, nil)
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(string(body))
	st := h.Stats()
	fmt.Printf("primaries %d, hedges %d, hedge wins %d\n", st.Primaries, st.Hedges, st.HedgeWins)
	// Output:
	// hedge after 1 attempt(s), with a deadline: true
	// primaries 1, hedges 1, hedge wins 1
}

// POST without an Idempotency-Key is never hedged: both copies could land. A POST
// with one (a keyed write) is hedged only under WithKeyedWrites: against a server
// that deduplicates, its copy waits for the first's answer.
func ExampleHedger_Transport_idempotency() {
	backend := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer backend.Close()
	for _, v := range []struct {
		name string
		opts []hedge.Option
	}{{"default", nil}, {"WithKeyedWrites", []hedge.Option{hedge.WithKeyedWrites()}}} {
		h := hedge.New(v.opts...)
		client := &http.Client{Transport: h.Transport(nil)}
		keyed, _ := http.NewRequest(http.MethodPost, backend.URL+"/orders", nil)
		keyed.Header.Set("Idempotency-Key", "6f1c…")
		for _, r := range []*http.Request{
			httptest.NewRequest(http.MethodGet, backend.URL+"/items/1", nil),
			httptest.NewRequest(http.MethodPut, backend.URL+"/items/1", nil),
			httptest.NewRequest(http.MethodPost, backend.URL+"/orders", nil),
			keyed,
		} {
			r.RequestURI = ""
			before := h.Stats().Primaries
			resp, err := client.Do(r)
			if err != nil {
				fmt.Println(err)
				return
			}
			resp.Body.Close()
			fmt.Println(v.name+":", r.Method, r.Header.Get("Idempotency-Key") != "", "hedgeable:", h.Stats().Primaries > before)
		}
		client.CloseIdleConnections()
	}
	// Output:
	// default: GET false hedgeable: true
	// default: PUT false hedgeable: true
	// default: POST false hedgeable: false
	// default: POST true hedgeable: false
	// WithKeyedWrites: GET false hedgeable: true
	// WithKeyedWrites: PUT false hedgeable: true
	// WithKeyedWrites: POST false hedgeable: false
	// WithKeyedWrites: POST true hedgeable: true
}
