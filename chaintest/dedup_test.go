package chaintest_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/retry"
)

// losesFirstAnswer lets every request reach the server, and loses the answer of the
// first one: the server ran it, the client sees a connection reset.
type losesFirstAnswer struct {
	base http.RoundTripper
	n    atomic.Int32
}

func (l *losesFirstAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(r)
	if err == nil && l.n.Add(1) == 1 {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return resp, err
}

// TestDedupAnswerLost: a POST whose answer is lost after the server ran it is
// retried with its key by the client's stack; the server's dedup answers the retry
// with the first's answer. One execution, and the client gets it.
func TestDedupAnswerLost(t *testing.T) {
	for _, withDedup := range []bool{false, true} {
		t.Run(fmt.Sprint("dedup=", withDedup), func(t *testing.T) {
			var charges atomic.Int32
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := charges.Add(1)
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, "charge %d", n)
			})
			var opts []deadlinekit.Option
			if withDedup {
				opts = append(opts, deadlinekit.WithDedup(dedup.NewMemoryStore()))
			}
			srv := httptest.NewServer(deadlinekit.NewHandler(h, opts...))
			defer srv.Close()
			lossy := &losesFirstAnswer{base: http.DefaultTransport}
			c := &http.Client{Transport: deadlinekit.NewTransport(lossy, deadlinekit.WithRetry(retry.WithIdempotencyKeys(nil)))}
			resp, err := c.Post(srv.URL+"/charges", "application/json", strings.NewReader(`{"amount":100}`))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := int32(2) // without dedup: a double charge
			if withDedup {
				want = 1
			}
			if resp.StatusCode != http.StatusCreated || charges.Load() != want {
				t.Fatalf("%d %q, %d executions; want 201 and %d", resp.StatusCode, body, charges.Load(), want)
			}
			if withDedup && (string(body) != "charge 1" || resp.Header.Get("Idempotent-Replayed") != "true") {
				t.Fatalf("client got %q (replayed %q), want the first's answer", body, resp.Header.Get("Idempotent-Replayed"))
			}
		})
	}
}

// TestDedupChain: client (HTTP) → gateway (HTTP, the stack) → ledger (gRPC, the
// stack with dedup). The gateway's first call to the ledger loses its answer after
// the ledger ran it; the gateway's retry layer sends it again with the same key, and
// the ledger replays. A declined card (a failure) is stored and replayed as well.
func TestDedupChain(t *testing.T) {
	led, addr := serveLedger(t)
	var lost atomic.Int32
	loseFirst := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && lost.Add(1) == 1 {
			return status.Error(codes.Unavailable, "connection reset after the call ran")
		}
		return err
	}
	cc := dial(t, addr, append(deadlinekit.DialOptions(deadlinekit.WithRetry(retry.WithIdempotencyKeys(nil))), grpc.WithChainUnaryInterceptor(loseFirst))...)
	ledgerClient := testgrpc.NewTestServiceClient(cc)
	gateway := httptest.NewServer(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ctx := r.Context()
		if k := r.Header.Get("Idempotency-Key"); k != "" { // the client's key goes on
			ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", k)
		}
		resp, err := ledgerClient.UnaryCall(ctx, &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: body}})
		if err != nil {
			http.Error(w, status.Convert(err).Message(), http.StatusPaymentRequired)
			return
		}
		fmt.Fprint(w, resp.GetUsername())
	})))
	defer gateway.Close()

	client := stackClient(t)
	post := func(key, body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, gateway.URL+"/pay", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("order-1", "100"); code != 200 || body != "charge 1" {
		t.Fatalf("first: %d %q", code, body)
	}
	if code, body := post("order-1", "100"); code != 200 || body != "charge 1" {
		t.Fatalf("the client's own repeat: %d %q", code, body)
	}
	if code, _ := post("order-2", "decline"); code != http.StatusPaymentRequired {
		t.Fatalf("declined: %d", code)
	}
	if code, body := post("order-2", "decline"); code != http.StatusPaymentRequired || body != "card declined\n" {
		t.Fatalf("declined, repeat: %d %q", code, body)
	}
	if n := led.n.Load(); n != 1 {
		t.Fatalf("the ledger charged %d times, want 1", n)
	}
}
