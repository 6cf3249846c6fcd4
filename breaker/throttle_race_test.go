package breaker_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/criticality"
)

// accepting accepts every call.
type accepting struct{}

func (accepting) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

// A healthy target's accepts are counted without the throttle's lock and taken
// into the head bucket when the window moves on: on the real clock, from many
// goroutines at every level, with a bucket ending every 100 ms while they land and
// snapshots read between them, none is lost nor counted twice. (Under synctest
// the clock stands still while goroutines run, so a bucket cannot end among
// them.) The window, 100 s, keeps them all; critical-plus weighs every level's
// accepts.
func TestThrottleKeepsEveryAcceptAcrossBucketEnds(t *testing.T) {
	b := breaker.New(breaker.WithAdaptiveThrottling(breaker.Throttle{Window: 100 * time.Second, Buckets: 1000}))
	rt := b.Transport(accepting{})
	var sent atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(time.Second)
	for g := range 16 {
		wg.Go(func() {
			ctx := criticality.With(context.Background(), criticality.Sheddable+criticality.Level(g%4))
			for i := 0; time.Now().Before(stop); i++ {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://a.test/", nil)
				if _, err := rt.RoundTrip(req); err != nil {
					t.Error(err)
					return
				}
				sent.Add(1)
				if g == 0 && i%256 == 0 {
					b.Circuits() // a snapshot takes the head's accepts in too
				}
			}
		})
	}
	wg.Wait()
	c, _ := b.Circuit("http://a.test:80")
	top := c.Throttle[len(c.Throttle)-1]
	if int64(top.Requests) != sent.Load() || top.Accepts != top.Requests || top.Probability != 0 {
		t.Fatalf("%d calls accepted; critical-plus weighs %+v", sent.Load(), top)
	}
}
