package deadlinekit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/hedge"
)

// One payment through client → gateway → payments, every client hedging (the
// root constructors, a hedge due 50 ms after its copy went out): the gateway does
// not deduplicate, it forwards the payment's Idempotency-Key to payments, which
// does (WithDedup). The first charge is slow: it answers once payments has seen
// three requests for it, or 500 ms after it has seen the last one the case
// expects. A copy of a keyed write buys nothing there but a request, so:
//   - by default neither client hedges the payment: payments sees it once;
//   - with hedge.WithKeyedWrites on both, the client hedges it, and both copies
//     are marked hedged-above: the gateway sends each once, and payments sees two
//     requests, never the third that the gateway's hedge of the client's last copy
//     would add;
//   - without the chain rule (the control: what the mark prevents), the gateway
//     hedges its calls too, and payments sees three or more.
//
// The charge runs once in every case.
func TestChainHedgesKeyedWriteOnce(t *testing.T) {
	checkLeaks(t)
	delay := hedge.WithDelay(hedge.Delay{Initial: 50 * time.Millisecond, MinSamples: 1 << 30})
	for _, v := range []struct {
		name             string
		opts             []hedge.Option
		expect           int64 // the requests at payments the case expects at least
		wantMin, wantMax int64
	}{
		{"default", nil, 1, 1, 1},
		{"WithKeyedWrites", []hedge.Option{hedge.WithKeyedWrites()}, 2, 2, 2},
		{"WithKeyedWrites without the chain rule", []hedge.Option{hedge.WithKeyedWrites(), hedge.WithoutChainRule()}, 2, 3, 4},
	} {
		t.Run(v.name, func(t *testing.T) {
			var calls, charges atomic.Int64
			expected, third := make(chan struct{}), make(chan struct{})
			payments := deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if charges.Add(1) == 1 {
					select {
					case <-expected:
					case <-third:
					case <-r.Context().Done():
						return
					}
					select {
					case <-third:
					case <-time.After(500 * time.Millisecond):
					case <-r.Context().Done():
						return
					}
				}
				io.WriteString(w, "charged")
			}), deadlinekit.WithDedup(dedup.NewMemoryStore()))
			ps := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch calls.Add(1) {
				case v.expect:
					close(expected)
				case 3:
					close(third)
				}
				payments.ServeHTTP(w, r)
			}))
			t.Cleanup(ps.Close)

			hedger := func() *hedge.Hedger { return hedge.New(append([]hedge.Option{delay}, v.opts...)...) }
			hClient, hGateway := hedger(), hedger()
			toPayments := &http.Client{Transport: deadlinekit.NewTransport(nil, deadlinekit.WithSharedHedger(hGateway))}
			t.Cleanup(toPayments.CloseIdleConnections)
			gw := httptest.NewServer(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, ps.URL+"/charges", strings.NewReader("10 EUR"))
				req.Header.Set("Idempotency-Key", r.Header.Get("Idempotency-Key"))
				resp, err := toPayments.Do(req)
				if err != nil {
					deadlinekit.WriteHTTPError(w, err)
					return
				}
				defer resp.Body.Close()
				w.WriteHeader(resp.StatusCode)
				io.Copy(w, resp.Body)
			})))
			t.Cleanup(gw.Close)
			client := &http.Client{Transport: deadlinekit.NewTransport(nil, deadlinekit.WithSharedHedger(hClient))}
			t.Cleanup(client.CloseIdleConnections)

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/payments", strings.NewReader("10 EUR"))
			req.Header.Set("Idempotency-Key", "payment-1")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			client.CloseIdleConnections()
			toPayments.CloseIdleConnections()
			gw.Close() // waits for the gateway's handlers, and so for their calls
			ps.Close()

			n := calls.Load()
			c, g := hClient.Stats(), hGateway.Stats()
			if resp.StatusCode != http.StatusOK || string(body) != "charged" || charges.Load() != 1 {
				t.Errorf("the user got %d %q, the charge ran %d times; want 200 \"charged\", once", resp.StatusCode, body, charges.Load())
			}
			if n < v.wantMin || n > v.wantMax {
				t.Errorf("payments saw %d requests for one payment (client hedges %d, keyed writes sent once %d; gateway hedges %d, covered %d, keyed writes sent once %d); want %d to %d",
					n, c.Hedges, c.KeyedWrites, g.Hedges, g.Covered, g.KeyedWrites, v.wantMin, v.wantMax)
			}
			if v.opts == nil && (c.KeyedWrites != 1 || g.KeyedWrites != 1 || c.Hedges+g.Hedges != 0) {
				t.Errorf("client %+v, gateway %+v; want each to count one keyed write sent once, no hedge", c, g)
			}
		})
	}
}
