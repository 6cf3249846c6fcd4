package dedup_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deadlinekit/deadlinekit/dedup"
)

// TestRunWithoutStoreLeavesTheRequestAlone: a request run without its store gets
// its body back as it was read, on a request of its own: the caller's request (a
// middleware outside may look at it once the handler returned) is not changed.
func TestRunWithoutStoreLeavesTheRequestAlone(t *testing.T) {
	var got string
	h := dedup.NewMiddleware(downStore{}, dedup.WithRunWithoutStore())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
	}))
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("charge"))
	r.Header.Set("Idempotency-Key", "k")
	body := r.Body
	h.ServeHTTP(httptest.NewRecorder(), r)
	if got != "charge" {
		t.Fatalf("the handler read %q", got)
	}
	if r.Body != body {
		t.Fatal("the caller's request has another body")
	}
}
