package shortcircuit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// DefaultAdaptiveLimit is plain data a program may set for the guards it makes
// next, and pass as it is documented ("Pass DefaultAdaptiveLimit for the
// defaults"): a value given in part (here Max alone) takes the package's figures
// for the rest (from 20, at least 1, tolerance 0.5, 48 samples), as an
// AdaptiveLimit given to WithAdaptiveConcurrency does, instead of a limit of 0
// that refuses every request of an idle server.
func TestDefaultAdaptiveLimitSetInPart(t *testing.T) {
	saved := shortcircuit.DefaultAdaptiveLimit
	t.Cleanup(func() { shortcircuit.DefaultAdaptiveLimit = saved })
	shortcircuit.DefaultAdaptiveLimit = shortcircuit.AdaptiveLimit{Max: 200}
	synctest.Test(t, func(t *testing.T) {
		h := shortcircuit.NewMiddleware(shortcircuit.WithAdaptiveConcurrency(shortcircuit.DefaultAdaptiveLimit))(
			http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("a request to an idle server: %d %s", rec.Code, rec.Body)
		}
	})
}

// So is DefaultAdaptive, the floor every guard without WithFloor learns: a value
// given in part (here the quantile alone) takes the package's figures for the
// rest.
func TestDefaultAdaptiveSetInPart(t *testing.T) {
	saved := shortcircuit.DefaultAdaptive
	t.Cleanup(func() { shortcircuit.DefaultAdaptive = saved })
	shortcircuit.DefaultAdaptive = shortcircuit.Adaptive{Quantile: 0.1}
	synctest.Test(t, func(t *testing.T) {
		var c shortcircuit.Counter
		h := shortcircuit.NewMiddleware(shortcircuit.WithObserver(c.Observe))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			<-time.After(10 * time.Millisecond) // the work
		}))
		serve := func(budget time.Duration) int {
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
			return rec.Code
		}
		for i := range 20 { // MinSamples, the package's
			if code := serve(time.Second); code != http.StatusOK {
				t.Fatalf("request %d: %d", i+1, code)
			}
		}
		// Learned over the package's 10 s window: the floor is the work's 10 ms.
		if code := serve(5 * time.Millisecond); code != http.StatusGatewayTimeout || c.Stats().BelowFloor != 1 {
			t.Fatalf("a request with half the work's time left: %d, %+v; want it refused below the learned floor", code, c.Stats())
		}
	})
}
