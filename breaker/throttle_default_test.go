package breaker_test

import (
	"net/http"
	"testing"
	"testing/synctest"

	"github.com/deadlinekit/deadlinekit/breaker"
)

// DefaultThrottle is plain data a program may set for all its breakers, as the
// project's other defaults are: a value given in part (here K alone) takes the
// package's own figures for the rest, as a Throttle given to
// WithAdaptiveThrottling does, instead of a window of no length in no bucket.
func TestDefaultThrottleSetInPart(t *testing.T) {
	saved := breaker.DefaultThrottle
	t.Cleanup(func() { breaker.DefaultThrottle = saved })
	breaker.DefaultThrottle = breaker.Throttle{K: 3}
	synctest.Test(t, func(t *testing.T) {
		rt := &refusing{refuse: true}
		b := breaker.New(breaker.WithRandom(func() float64 { return 0 })) // a draw of 0 refuses when it may
		client := &http.Client{Transport: b.Transport(rt)}
		throttled, _ := getThrottled(t, client, 20)
		// MinRequests 10, the package's: ten sent and refused, the rest throttled.
		if rt.sent != 10 || throttled != 10 {
			t.Fatalf("%d sent, %d throttled; want 10 and 10", rt.sent, throttled)
		}
	})
}
