package hedge_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
)

// TestCallerReusesRequestAfterClose: a caller may change and send again its request
// once the response's body is closed (http.RoundTripper's contract). A hedge still
// on its way when the call was decided must not read the request then.
func TestCallerReusesRequestAfterClose(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Grpc-Previous-Rpc-Attempts") == "" {
			_ = sleep(r.Context(), 3*time.Millisecond)
		} else {
			_ = sleep(r.Context(), time.Second)
		}
		_, _ = io.WriteString(w, r.Header.Get("X-Seq"))
	}))
	defer srv.Close()
	// Copies go out on connections of their own, and a hedge comes back late, so
	// that nothing orders its steps before the caller's next ones.
	primaries, hedges := &http.Transport{}, &http.Transport{}
	defer primaries.CloseIdleConnections()
	defer hedges.CloseIdleConnections()
	base := testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Header.Get("Grpc-Previous-Rpc-Attempts") != "" {
			resp, err := hedges.RoundTrip(r)
			time.Sleep(20 * time.Millisecond) // a transport slow to see its request cancelled
			return resp, err
		}
		return primaries.RoundTrip(r)
	})
	rt := hedge.NewTransport(base,
		hedge.WithDelay(hedge.Delay{Initial: 2 * time.Millisecond, MinSamples: 1 << 20}), hedge.WithMaxExtraLoad(1))
	testkit.Parallel(6, 6, func(int) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/x", nil)
		for i := range 60 {
			req.Header.Set("X-Seq", strconv.Itoa(i))
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}
