package dedup_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/otelattr"
)

// A keyed request whose sender died while sending its body (the connection closed
// before Content-Length bytes came) is a caller that left, not a malformed
// request: the handler does not run, and the outcome is canceled (499), as for any
// caller that leaves before its key is settled. A new user's payments trial saw
// the ledger count the charge of a replica killed mid-request as malformed (400).
// A body that is malformed while the connection lives (a broken chunked encoding)
// is still a 400.
func TestABodyCutByItsSendersDeathIsCanceled(t *testing.T) {
	for _, tc := range []struct {
		name, request string
		outcome       string
		status        int
	}{
		{"cut short", "POST /charges HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k1\r\nContent-Length: 100\r\n\r\n0123456789", "canceled", 499},
		{"broken chunked encoding", "POST /charges HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k2\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed", http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sr := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
			defer tp.Shutdown(context.Background())
			ran := false
			h := dedup.NewMiddleware(dedup.NewMemoryStore())(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
			served := make(chan int, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx, span := tp.Tracer("test").Start(r.Context(), "server")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r.WithContext(ctx))
				span.End()
				served <- rec.Code
			}))
			defer srv.Close()
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Write([]byte(tc.request)); err != nil {
				t.Fatal(err)
			}
			conn.(*net.TCPConn).CloseWrite() // the sender is gone before the rest of its body
			code := <-served
			conn.Close()
			if ran || code != tc.status {
				t.Fatalf("answered %d, the handler ran: %v; want %d and no run", code, ran, tc.status)
			}
			spans := sr.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans", len(spans))
			}
			testkit.WantAttrs(t, spans[0], otelattr.DedupOutcomeKey.String(tc.outcome))
		})
	}
}
