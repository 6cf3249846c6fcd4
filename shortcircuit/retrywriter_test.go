package shortcircuit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/deadlinekit/deadlinekit/retry"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// TestSuccessUnderRetrysServerSide: right inside retry's server side, as the stack
// puts it, the guard judges a request's success by the status its handler wrote, as
// it does on its own: a 5xx is a failure; a 4xx, a body written without a status,
// an informational status followed by a success, and nothing written are not.
func TestSuccessUnderRetrysServerSide(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(http.ResponseWriter)
		want  bool
	}{
		{"500", func(w http.ResponseWriter) { w.WriteHeader(http.StatusInternalServerError) }, false},
		{"503 after a 103", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusServiceUnavailable)
		}, false},
		{"404", func(w http.ResponseWriter) { w.WriteHeader(http.StatusNotFound) }, true},
		{"body only", func(w http.ResponseWriter) { io.WriteString(w, "ok") }, true},
		{"body, then a 500 too late", func(w http.ResponseWriter) {
			io.WriteString(w, "ok")
			w.WriteHeader(http.StatusInternalServerError)
		}, true},
		{"nothing", func(http.ResponseWriter) {}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []bool
			guard := shortcircuit.NewMiddleware(shortcircuit.WithObserver(func(_ context.Context, e shortcircuit.Event) {
				got = append(got, e.Success)
			}))
			h := retry.NewMiddleware()(guard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { tc.serve(w) })))
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/item", nil))
			if len(got) != 1 || got[0] != tc.want {
				t.Errorf("observed success %v; want [%v]", got, tc.want)
			}
		})
	}
}
