package hedge_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/propagate"
)

// TestPrimaryOverPropagate: above propagate's transport with a reserve, the
// primary goes out as propagate alone would send it: under the caller's deadline
// less the reserve, told that budget, with the chain rule's mark, in a header map
// of its own (the caller's is untouched), its context alive until the answer's
// body is closed, and released then.
func TestPrimaryOverPropagate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sent *http.Request
		base := testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			sent = r
			return response(r, 200, io.NopCloser(strings.NewReader("ok"))), nil
		})
		rt := hedge.NewTransport(propagate.NewTransport(base, propagate.WithReserve(100*time.Millisecond)),
			hedge.WithDelay(hedge.Delay{Initial: time.Millisecond}))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		parent, _ := ctx.Deadline()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://backend.test/", nil)
		req.Header.Set("X-Caller", "1")
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if dl, ok := sent.Context().Deadline(); !ok || !dl.Equal(parent.Add(-100*time.Millisecond)) {
			t.Errorf("attempt's deadline %v, %v; want the caller's less the reserve, %v", dl, ok, parent.Add(-100*time.Millisecond))
		}
		if got, err := propagate.DecodeGRPCTimeout(sent.Header.Get(propagate.HeaderGRPCTimeout)); err != nil || got != 900*time.Millisecond {
			t.Errorf("grpc-timeout %v, %v; want 900ms", got, err)
		}
		if sent.Header.Get("Deadlinekit-Hedged-Above") != "1" || sent.Header.Get("X-Caller") != "1" {
			t.Errorf("sent header %v; want the caller's with the mark", sent.Header)
		}
		if len(req.Header) != 1 {
			t.Errorf("caller's header changed: %v", req.Header)
		}
		if sent.Context().Err() != nil {
			t.Fatal("attempt's context ended before the body was read")
		}
		resp.Body.Close()
		if sent.Context().Err() == nil {
			t.Error("attempt's context not released by Close")
		}
	})
}
