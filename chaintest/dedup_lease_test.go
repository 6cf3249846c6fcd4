package chaintest_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/dedup"
)

// TestDedupRepeatRefusedInsideItsBudget: under the stack's defaults (a floor of
// 1 ms), a repeat that waits for a first request that outlasts it stops waiting
// dedup.MinRefusalReserve before its deadline, so that its 409 and Retry-After reach
// its caller while the caller still waits for them (with 1 ms kept, a loaded server
// answered after the caller's deadline and the user saw a 504 without a come-back).
func TestDedupRepeatRefusedInsideItsBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var n atomic.Int64
		h := deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				<-release
			}
			w.WriteHeader(http.StatusCreated)
		}), deadlinekit.WithDedup(dedup.NewMemoryStore()))
		send := func(timeout string) (*httptest.ResponseRecorder, time.Duration) {
			req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader("100"))
			req.Header.Set("Idempotency-Key", "k")
			req.Header.Set("Grpc-Timeout", timeout)
			rec := httptest.NewRecorder()
			start := time.Now()
			h.ServeHTTP(rec, req)
			return rec, time.Since(start)
		}
		first := make(chan int)
		go func() { r, _ := send("5S"); first <- r.Code }()
		synctest.Wait()
		r, took := send("200m")
		if r.Code != http.StatusConflict || r.Header().Get("Retry-After") == "" {
			t.Errorf("repeat: %d Retry-After %q, want 409 with a come-back", r.Code, r.Header().Get("Retry-After"))
		}
		if want := 200*time.Millisecond - dedup.MinRefusalReserve; took != want {
			t.Errorf("repeat answered after %v, want %v (its budget less dedup.MinRefusalReserve)", took, want)
		}
		close(release)
		if c := <-first; c != http.StatusCreated {
			t.Errorf("first: %d", c)
		}
	})
}
