package chaintest_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/deadlinekit/deadlinekit"
)

// payments is the gRPC hop behind a gateway: a ledger behind the server stack with
// dedup, and a client of it through the client stack (opts).
func edgePayments(t *testing.T, opts ...deadlinekit.Option) (*ledger, testgrpc.TestServiceClient) {
	t.Helper()
	led, addr := serveLedger(t)
	cc := dial(t, addr, deadlinekit.DialOptions(opts...)...)
	return led, testgrpc.NewTestServiceClient(cc)
}

// gatewayHandler forwards a payment to the gRPC hop with the caller's key, as a
// user writes it from the README, and answers the hop's failure with answer.
func gatewayHandler(c testgrpc.TestServiceClient, answer func(*http.Request, error) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ctx := r.Context()
		if k := r.Header.Get("Idempotency-Key"); k != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", k)
		}
		resp, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: body}})
		if err != nil {
			deadlinekit.WriteHTTPError(w, answer(r, deadlinekit.FromGRPC(err, nil)))
			return
		}
		io.WriteString(w, resp.GetUsername())
	})
}

func postKeyed(t *testing.T, url string, keys []string, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	for _, k := range keys {
		req.Header.Add("Idempotency-Key", k)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, strings.TrimSpace(string(b))
}

// A key used again for a different payment is refused by the gRPC hop's dedup
// (FailedPrecondition); the gateway in front of it answers 422, as dedup's own HTTP
// middleware does and the README promises, whether it relays the failure as it came
// (WriteHTTPError) or in public words (Public).
func TestKeyReusedThroughAGRPCHopIs422(t *testing.T) {
	for _, c := range []struct {
		name   string
		answer func(*http.Request, error) error
		body   string
		opts   []deadlinekit.Option
	}{
		{"relayed", func(_ *http.Request, err error) error { return err }, "dedup: this idempotency-key was used for a different call (method or message differ)", nil},
		{"public", func(r *http.Request, err error) error { return deadlinekit.Public(r.Context(), err) }, "this Idempotency-Key was used for a different request", nil},
		{"edge", func(_ *http.Request, err error) error { return err }, "this Idempotency-Key was used for a different request", []deadlinekit.Option{deadlinekit.WithEdge()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			led, client := edgePayments(t)
			gw := httptest.NewServer(deadlinekit.NewHandler(gatewayHandler(client, c.answer), c.opts...))
			defer gw.Close()
			if resp, body := postKeyed(t, gw.URL, []string{"order-1"}, "100"); resp.StatusCode != 200 || body != "charge 1" {
				t.Fatalf("first payment: %d %q", resp.StatusCode, body)
			}
			resp, body := postKeyed(t, gw.URL, []string{"order-1"}, "250")
			if resp.StatusCode != http.StatusUnprocessableEntity || body != c.body {
				t.Fatalf("the key again for another amount: %d %q; want 422 %q", resp.StatusCode, body, c.body)
			}
			if n := led.n.Load(); n != 1 {
				t.Fatalf("the ledger charged %d times, want 1", n)
			}
		})
	}
}

// A gateway that forwards its caller's key by hand, with no edge option: a key
// grpc-go cannot send (not ASCII) or dedup would refuse is refused by the client
// stack before sending, InvalidArgument naming the character, and the gateway
// answers 400, not grpc-go's Internal (500). The ledger never runs.
func TestForwardedMalformedKeyIsInvalidArgument(t *testing.T) {
	led, client := edgePayments(t)
	gw := httptest.NewServer(deadlinekit.NewHandler(gatewayHandler(client, func(_ *http.Request, err error) error { return err })))
	defer gw.Close()
	for _, c := range []struct{ key, body string }{
		{"clé", "malformed Idempotency-Key: character 'é' (U+00E9) at position 2 is not visible ASCII"},
		{"a b", "malformed Idempotency-Key: character ' ' (U+0020) at position 1 is not visible ASCII"},
		{strings.Repeat("k", 300), "malformed Idempotency-Key: longer than 255 characters"},
	} {
		resp, body := postKeyed(t, gw.URL, []string{c.key}, "100")
		if resp.StatusCode != http.StatusBadRequest || body != c.body {
			t.Errorf("key %.20q: %d %q; want 400 %q", c.key, resp.StatusCode, body, c.body)
		}
	}
	if n := led.n.Load(); n != 0 {
		t.Fatalf("the ledger ran %d times", n)
	}
}

// An edge gateway in front of the gRPC hop, with two Idempotency-Key lines or a key
// it cannot forward: 400 naming the fault, and nothing forwarded or run (before, the
// first line went on and the payment ran).
func TestEdgeGatewayRefusesDoubledKey(t *testing.T) {
	led, client := edgePayments(t)
	gw := httptest.NewServer(deadlinekit.NewHandler(gatewayHandler(client, func(_ *http.Request, err error) error { return err }), deadlinekit.WithEdge()))
	defer gw.Close()
	for _, c := range []struct {
		keys []string
		body string
	}{
		{[]string{"order-1", "order-2"}, "malformed Idempotency-Key: 2 values, want one"},
		{[]string{"order-1", "order-1"}, "malformed Idempotency-Key: 2 values, want one"},
		{[]string{"clé"}, "malformed Idempotency-Key: character 'é' (U+00E9) at position 2 is not visible ASCII"},
	} {
		resp, body := postKeyed(t, gw.URL, c.keys, "100")
		if resp.StatusCode != http.StatusBadRequest || body != c.body {
			t.Errorf("keys %q: %d %q; want 400 %q", c.keys, resp.StatusCode, body, c.body)
		}
	}
	if n := led.n.Load(); n != 0 {
		t.Fatalf("the ledger charged %d times, want 0", n)
	}
}
