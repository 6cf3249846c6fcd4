package connectkit_test

import (
	"bytes"
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/propagate"
)

// Hostile timeout headers on the Connect protocol: connect-go reads them; the
// handler's stack clamps what it accepted to the server's maximum, applies the
// default budget when there is none, and nothing panics.
func TestHostileConnectTimeouts(t *testing.T) {
	var left atomic.Int64
	url, hc := serve(t, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
		d, _ := deadline.Remaining(ctx)
		left.Store(int64(d))
		return ok(ctx, req)
	}, connectkit.HandlerOption())
	for _, tc := range []struct {
		header string
		max    time.Duration // the most the handler may have; 0: the call fails
	}{
		{"", deadline.DefaultBudget},                // none: the default budget
		{"9999999999", propagate.DefaultMaxTimeout}, // 10 digits, 115 days: clamped
		{"1000", time.Second},                       // an honest second
		{"99999999999", 0},                          // 11 digits: not the protocol's
		{"-5", 0},                                   // negative
		{"1e3", 0},                                  // not digits
		{"18446744073709551616", 0},                 // past uint64
		{"0", 0},                                    // already expired
		{" 100", 0},                                 // leading space
	} {
		left.Store(-1)
		req, _ := http.NewRequest(http.MethodPost, url+procGet, bytes.NewReader([]byte(`"x"`)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Connect-Protocol-Version", "1")
		if tc.header != "" {
			req.Header.Set("Connect-Timeout-Ms", tc.header)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%q: %v", tc.header, err)
		}
		resp.Body.Close()
		got := time.Duration(left.Load())
		switch {
		case tc.max == 0 && resp.StatusCode == http.StatusOK:
			t.Errorf("%q: 200, the handler had %v; want a refusal", tc.header, got)
		case tc.max > 0 && (resp.StatusCode != http.StatusOK || got <= 0 || got > tc.max):
			t.Errorf("%q: %d, the handler had %v; want 200 with at most %v", tc.header, resp.StatusCode, got, tc.max)
		}
	}
}
