package chaintest_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/hedge"
)

// One payment through client → gateway (HTTP) → payments (HTTP or gRPC), every
// client hedging (the root constructors, a hedge due 50 ms after its copy went
// out): the gateway does not deduplicate, it forwards the payment's key to
// payments, which does (WithDedup). The first charge is slow: it answers once payments has seen
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
		for _, proto := range []string{"HTTP", "gRPC"} {
			t.Run(proto+"/"+v.name, func(t *testing.T) {
				keyedChain(t, proto, delay, v.opts, v.expect, v.wantMin, v.wantMax)
			})
		}
	}
}

// keyedChain runs one case of TestChainHedgesKeyedWriteOnce, payments served over
// proto.
func keyedChain(t *testing.T, proto string, delay hedge.Option, opts []hedge.Option, expect, wantMin, wantMax int64) {
	var calls, charges atomic.Int64
	expected, third := make(chan struct{}), make(chan struct{})
	arrived := func() {
		switch calls.Add(1) {
		case expect:
			close(expected)
		case 3:
			close(third)
		}
	}
	// The charge: the first run is slow.
	charge := func(ctx context.Context) error {
		if charges.Add(1) == 1 {
			select {
			case <-expected:
			case <-third:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case <-third:
			case <-time.After(500 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	hedger := func() *hedge.Hedger { return hedge.New(append([]hedge.Option{delay}, opts...)...) }
	hClient, hGateway := hedger(), hedger()
	gatewayClient := []deadlinekit.Option{deadlinekit.WithSharedHedger(hGateway)}

	// pay is the gateway's call to payments, with the payment's key.
	var pay func(ctx context.Context, key string) error
	var stopPayments func()
	switch proto {
	case "HTTP":
		payments := deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := charge(r.Context()); err != nil {
				return
			}
			io.WriteString(w, "charged")
		}), deadlinekit.WithDedup(dedup.NewMemoryStore()))
		ps := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrived()
			payments.ServeHTTP(w, r)
		}))
		toPayments := &http.Client{Transport: deadlinekit.NewTransport(nil, gatewayClient...)}
		pay = func(ctx context.Context, key string) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ps.URL+"/charges", strings.NewReader("10 EUR"))
			req.Header.Set("Idempotency-Key", key)
			resp, err := toPayments.Do(req)
			err = deadlinekit.FromHTTP(resp, err)
			if resp != nil {
				resp.Body.Close()
			}
			return err
		}
		stopPayments = func() { toPayments.CloseIdleConnections(); ps.Close() }
	case "gRPC":
		count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			arrived()
			return handler(ctx, req)
		}
		gs := grpc.NewServer(append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(count)},
			deadlinekit.ServerOptions(deadlinekit.WithDedup(dedup.NewMemoryStore()))...)...)
		gs.RegisterService(hopService(charge), nil)
		conn := dial(t, serveGRPC(t, gs), deadlinekit.DialOptions(gatewayClient...)...)
		pay = func(ctx context.Context, key string) error {
			ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
			return deadlinekit.FromGRPC(invoke(ctx, conn), nil)
		}
		stopPayments = func() { conn.Close(); gs.Stop() }
	}
	t.Cleanup(stopPayments)

	// The gateway does not deduplicate: it forwards the payment's key.
	gw := httptest.NewServer(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := pay(r.Context(), r.Header.Get("Idempotency-Key")); err != nil {
			deadlinekit.WriteHTTPError(w, err)
			return
		}
		io.WriteString(w, "charged")
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
	gw.Close() // waits for the gateway's handlers, and so for their calls
	stopPayments()

	n := calls.Load()
	c, g := hClient.Stats(), hGateway.Stats()
	if resp.StatusCode != http.StatusOK || string(body) != "charged" || charges.Load() != 1 {
		t.Errorf("the user got %d %q, the charge ran %d times; want 200 \"charged\", once", resp.StatusCode, body, charges.Load())
	}
	if n < wantMin || n > wantMax {
		t.Errorf("payments saw %d requests for one payment (client hedges %d, keyed writes sent once %d; gateway hedges %d, covered %d, keyed writes sent once %d); want %d to %d",
			n, c.Hedges, c.KeyedWrites, g.Hedges, g.Covered, g.KeyedWrites, wantMin, wantMax)
	}
	if opts == nil && (c.KeyedWrites != 1 || g.KeyedWrites != 1 || c.Hedges+g.Hedges != 0) {
		t.Errorf("client %+v, gateway %+v; want each to count one keyed write sent once, no hedge", c, g)
	}
}
