package dedup

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"unsafe"
)

// TestHTTPRunningFitsItsSizeClass: the state of a keyed request's run is one
// allocation on every first run; at 480 bytes it takes the allocator's 480-byte
// size class, not the 512-byte one.
func TestHTTPRunningFitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(httpRunning{}); n > 480 {
		t.Errorf("httpRunning is %d bytes, want at most 480 (run %d, body %d, recorder %d, request %d)",
			n, unsafe.Sizeof(runContext{}), unsafe.Sizeof(bodyReader{}), unsafe.Sizeof(recorder{}), unsafe.Sizeof(http.Request{}))
	}
}

// TestLargestResponseLimit: a limit beyond what the recorder counts in 32 bits
// records answers as any other.
func TestLargestResponseLimit(t *testing.T) {
	h := NewMiddleware(NewMemoryStore(), WithMaxResponseSize(math.MaxInt))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("made"))
	}))
	for i, want := range []string{"", "true"} {
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.Header.Set("Idempotency-Key", "k")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated || rec.Body.String() != "made" || rec.Header().Get(ReplayedHeader) != want {
			t.Fatalf("request %d: %d %q, replayed %q", i, rec.Code, rec.Body.String(), rec.Header().Get(ReplayedHeader))
		}
	}
}
