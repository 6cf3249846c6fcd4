package chaintest_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/otelattr"
)

// The README's client setup, otelhttp outermost: otelhttp's client span is the call's
// span, and it ends when the caller is done with the body (read to EOF, or closed,
// whichever first). The call's totals must be on it however the body ends: a caller
// that closes an error answer unread is common, and so is one whose context ends
// while the body is still being read.
func TestCallTotalsOnOtelhttpSpanHoweverTheBodyEnds(t *testing.T) {
	// The first request of each case fails with 503 (retried: a GET), the second
	// answers with a body larger than one read, so that "before EOF" is before it
	// (a slow one when the caller's context ends while it reads).
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path]++
		n := seen[r.URL.Path]
		mu.Unlock()
		if n == 1 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/context") {
			// A slow body: the rest comes only after the caller has given up.
			io.WriteString(w, strings.Repeat("x", 512))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		io.WriteString(w, strings.Repeat("x", 256<<10))
	}))
	defer srv.Close()

	cases := []struct {
		name string
		end  func(t *testing.T, body io.ReadCloser, cancel context.CancelFunc)
	}{
		{"read to EOF", func(t *testing.T, body io.ReadCloser, _ context.CancelFunc) {
			if _, err := io.Copy(io.Discard, body); err != nil {
				t.Fatal(err)
			}
			body.Close()
		}},
		{"closed before EOF", func(t *testing.T, body io.ReadCloser, _ context.CancelFunc) {
			if _, err := body.Read(make([]byte, 512)); err != nil {
				t.Fatal(err)
			}
			body.Close()
		}},
		{"closed unread", func(_ *testing.T, body io.ReadCloser, _ context.CancelFunc) {
			body.Close()
		}},
		{"context ended while reading", func(t *testing.T, body io.ReadCloser, cancel context.CancelFunc) {
			if _, err := body.Read(make([]byte, 512)); err != nil {
				t.Fatal(err)
			}
			cancel()
			if _, err := io.Copy(io.Discard, body); err == nil {
				t.Error("the body read to its end after its context ended")
			}
			body.Close()
		}},
		{"context ended, then closed", func(_ *testing.T, body io.ReadCloser, cancel context.CancelFunc) {
			cancel()
			body.Close()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tp, rec := traced(t)
			c := &http.Client{Transport: otelhttp.NewTransport(deadlinekit.NewTransport(nil), otelhttp.WithTracerProvider(tp))}
			defer c.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(context.Background(), 10e9)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/"+strings.ReplaceAll(tc.name, " ", "-"), nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d; want 200 after a retry", resp.StatusCode)
			}
			tc.end(t, resp.Body, cancel)

			var call []string
			for _, s := range rec.Ended() {
				if s.SpanKind() != trace.SpanKindClient || s.InstrumentationScope().Name == otelattr.ScopeName {
					continue
				}
				call = append(call, s.Name())
				testkit.WantAttrs(t, s,
					otelattr.AttemptsKey.Int(2), otelattr.RetryCountKey.Int(1),
					otelattr.RetryStopReasonKey.String("answered"), otelattr.HedgeSkipKey.String("warming_up"))
				if _, ok := testkit.Attrs(s)[otelattr.BudgetSentKey]; !ok {
					t.Errorf("span %q: no %s", s.Name(), otelattr.BudgetSentKey)
				}
			}
			if len(call) != 1 {
				t.Fatalf("ended otelhttp client spans %v; want one, the call's", call)
			}
		})
	}
}
