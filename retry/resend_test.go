package retry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deadlinekit/deadlinekit/internal/record"
	"github.com/deadlinekit/deadlinekit/otelattr"
	"github.com/deadlinekit/deadlinekit/retry"
)

// net/http resends a POST carrying an Idempotency-Key by itself when the reused
// connection it went out on closes before an answer: the server runs it twice under
// one attempt of the layer. The attempt's span counts that resend
// (deadlinekit.attempt.transport_resends) and the call's attempts include it.
func TestTransportResendCounted(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Method == http.MethodPost && posts.Add(1) == 1 {
			// The handler read the request, then its connection dies unanswered.
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	client := newClient(t, retry.WithBudget(nil))
	do := func(ctx context.Context, method string) {
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL, strings.NewReader("pay 5"))
		req.Header.Set("Idempotency-Key", "order-1")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	do(context.Background(), http.MethodPut) // leaves a connection for the POST to reuse

	spans := spansOf(t, func(ctx context.Context) { do(ctx, http.MethodPost) })
	if posts.Load() != 2 {
		t.Fatalf("the server got the POST %d times; want 2 (net/http's own resend)", posts.Load())
	}
	call, attempts := dedupSpans(t, spans)
	if len(attempts) != 1 {
		t.Fatalf("%d attempt spans; want 1 (the layer did not retry)", len(attempts))
	}
	if got := attempts[0][otelattr.AttemptTransportResendsKey].AsInt64(); got != 1 {
		t.Errorf("attempt span: %d transport resends; want 1", got)
	}
	if got := call[otelattr.AttemptsKey].AsInt64(); got != 2 {
		t.Errorf("call span: %d attempts; want 2 (the resend counts)", got)
	}
}

// hedgingRT stands in for a hedging layer beneath the retry layer: it sends a
// primary and a hedge under the attempt's context (the header written twice) and
// records the hedge, as package hedge does.
type hedgingRT struct{}

func (hedgingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	tr := httptrace.ContextClientTrace(r.Context())
	tr.WroteHeaders() // the primary
	tr.WroteHeaders() // the hedge
	record.HedgeCall(r.Context(), 1, true, "")
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

// A hedge a layer beneath sent is no transport resend: counted once, as a hedge.
func TestHedgeIsNoTransportResend(t *testing.T) {
	rt := retry.NewTransport(hedgingRT{}, retry.WithBudget(nil))
	spans := spansOf(t, func(ctx context.Context) {
		ctx, call := record.StartCall(ctx, record.HTTP, "GET")
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://svc/", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		call.End(nil)
	})
	call, attempts := dedupSpans(t, spans)
	if _, ok := attempts[0][otelattr.AttemptTransportResendsKey]; ok {
		t.Errorf("attempt span counts a hedge as a transport resend")
	}
	if got := call[otelattr.AttemptsKey].AsInt64(); got != 2 {
		t.Errorf("call span: %d attempts; want 2 (the primary and its hedge)", got)
	}
}
