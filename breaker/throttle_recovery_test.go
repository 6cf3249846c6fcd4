package breaker_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

// capacity is a RoundTripper for a server that accepts perSecond calls in each
// second and refuses the rest for load (503, Retry-After), on the bubble's clock.
type capacity struct {
	perSecond         int
	second            int64
	used              int
	accepted, refused int
}

func (c *capacity) RoundTrip(req *http.Request) (*http.Response, error) {
	if s := time.Now().Unix(); s != c.second {
		c.second, c.used = s, 0
	}
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}
	if c.used < c.perSecond {
		c.used++
		c.accepted++
		return resp, nil
	}
	c.refused++
	resp.StatusCode = 503
	resp.Header.Set(pushback.RetryAfterKey, "1")
	return resp, nil
}

// A server of fixed capacity offered 10 times it for a minute: the throttle sends it
// about K times what it accepts, so that refusals take about as many calls as
// answers; when the load falls below the capacity, every call goes through again
// within a window (the figure is logged): once the server has accepted 10 calls in a
// row and refused none in a whole bucket, the throttle's own refusals no longer count.
func TestThrottleUnderOverloadAndAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const C = 50
		srv := &capacity{perSecond: C}
		rt := breaker.New(breaker.WithAdaptiveThrottling(breaker.DefaultThrottle),
			breaker.WithRandom(rand.New(rand.NewPCG(3, 4)).Float64)).Transport(srv)
		call := func() bool { // reports whether the call was throttled
			req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://busy.test/", nil)
			resp, err := rt.RoundTrip(req)
			if errors.Is(err, breaker.ErrThrottled) {
				return true
			}
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return false
		}
		const overload = 60 // seconds at 10 × C
		for range overload * 10 * C {
			call()
			time.Sleep(time.Second / (10 * C))
		}
		sent := srv.accepted + srv.refused
		t.Logf("offered %d/s to a capacity of %d/s: sent %.0f/s, accepted %.0f/s, refused %.0f/s",
			10*C, C, float64(sent)/overload, float64(srv.accepted)/overload, float64(srv.refused)/overload)
		if sent > 3*C*overload || srv.accepted < C*overload*9/10 {
			t.Fatalf("sent %d, accepted %d in %d s: want at most 3 C/s sent, and the capacity used", sent, srv.accepted, overload)
		}
		// The load falls to 80% of the capacity: how long until a whole second
		// passes with no call throttled?
		var recovered time.Duration
		start := time.Now()
		for s := 1; recovered == 0; s++ {
			if time.Since(start) > breaker.DefaultThrottle.Window {
				t.Fatalf("still throttling %v after the overload", time.Since(start))
			}
			throttled := false
			for range C * 8 / 10 {
				throttled = call() || throttled
				time.Sleep(time.Second / (C * 8 / 10))
			}
			if !throttled {
				recovered = time.Duration(s) * time.Second
			}
		}
		t.Logf("after the overload, no call throttled from %v on (window %v)", recovered, breaker.DefaultThrottle.Window)
	})
}
