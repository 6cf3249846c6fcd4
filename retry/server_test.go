package retry_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"

	"github.com/deadlinekit/deadlinekit/retry"
)

func TestMiddleware(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		down := &fakeRT{fn: always(503)}
		out := retry.NewTransport(down, retry.WithBudget(nil))
		// ResponseController reaches the underlying writer through the middleware.
		flushed := retry.NewMiddleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("Flush through the middleware: %v", err)
			}
		}))
		rec := httptest.NewRecorder()
		flushed.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if !rec.Flushed || rec.Code != 200 {
			t.Fatalf("flushed %v, code %d", rec.Flushed, rec.Code)
		}

		// The handler's layer retries (3 calls), gives up, and the relayed failure
		// says "do not retry".
		h2 := retry.NewMiddleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			req, _ := http.NewRequestWithContext(r.Context(), "GET", "http://down/", nil)
			resp, _ := out.RoundTrip(req)
			resp.Body.Close()
			w.WriteHeader(resp.StatusCode)
		}))
		rec = httptest.NewRecorder()
		h2.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if down.attempts() != 3 || rec.Code != 503 || rec.Header().Get("grpc-retry-pushback-ms") != "-1" {
			t.Fatalf("relay: code %d, pushback %q; want 503 with -1", rec.Code, rec.Header().Get("grpc-retry-pushback-ms"))
		}

		// The inbound request is a retry attempt: one outbound attempt, no pushback.
		before := down.attempts()
		in := httptest.NewRequest("GET", "/", nil)
		in.Header.Set("grpc-previous-rpc-attempts", "1")
		rec = httptest.NewRecorder()
		h2.ServeHTTP(rec, in)
		if down.attempts()-before != 1 || rec.Header().Get("grpc-retry-pushback-ms") != "" {
			t.Fatalf("serving a retry: %d downstream calls, pushback %q", down.attempts()-before, rec.Header().Get("grpc-retry-pushback-ms"))
		}

		// Success answers never carry it.
		ok := retry.NewMiddleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hi")) }))
		rec = httptest.NewRecorder()
		ok.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != 200 || rec.Header().Get("grpc-retry-pushback-ms") != "" {
			t.Fatal("success answer altered")
		}
	})
}
