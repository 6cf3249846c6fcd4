package breaker_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

func TestThrottleProbability(t *testing.T) {
	cases := []struct {
		name              string
		th                breaker.Throttle
		requests, accepts int
		want              float64
	}{
		{"nothing yet", breaker.DefaultThrottle, 0, 0, 0},
		{"all accepted", breaker.DefaultThrottle, 100, 100, 0},
		{"half accepted: K = 2 still sends all", breaker.DefaultThrottle, 100, 50, 0},
		{"a third accepted", breaker.DefaultThrottle, 99, 33, 33.0 / 100},
		{"none accepted", breaker.DefaultThrottle, 10, 0, 10.0 / 11},
		{"below MinRequests", breaker.DefaultThrottle, 9, 0, 0},
		{"one refused", breaker.DefaultThrottle, 1, 0, 0},
		{"one refused, MinRequests 1", breaker.Throttle{MinRequests: 1}, 1, 0, 0.5},
		{"negative MinRequests is the default", breaker.Throttle{MinRequests: -1}, 9, 0, 0},
		{"K = 1.1", breaker.Throttle{K: 1.1}, 110, 50, 55.0 / 111},
		{"zero K is the default", breaker.Throttle{}, 99, 33, 33.0 / 100},
		{"NaN K is the default", breaker.Throttle{K: math.NaN()}, 99, 33, 33.0 / 100},
		{"K below 1 is 1", breaker.Throttle{K: 0.5}, 100, 100, 0},
		{"K below 1 is 1, refusals", breaker.Throttle{K: 0.5}, 99, 49, 0.5},
		{"infinite K, an accept", breaker.Throttle{K: math.Inf(1)}, 1000, 1, 0},
		{"infinite K, no accept", breaker.Throttle{K: math.Inf(1), MinRequests: 1}, 3, 0, 0.75},
		{"negative counts are zero", breaker.DefaultThrottle, -5, -5, 0},
		{"more accepts than requests", breaker.DefaultThrottle, 1, 5, 0},
	}
	for _, c := range cases {
		got := c.th.Probability(c.requests, c.accepts)
		if math.Abs(got-c.want) > 1e-12 || got < 0 || got >= 1 {
			t.Errorf("%s: Probability(%d, %d) = %v, want %v", c.name, c.requests, c.accepts, got, c.want)
		}
	}
}

func TestThrottleReject(t *testing.T) {
	th := breaker.DefaultThrottle
	// 10 requests, 2 accepts: p = (10 − 4) / 11.
	p := 6.0 / 11
	for _, c := range []struct {
		u    float64
		want bool
	}{{0, true}, {p - 1e-9, true}, {p, false}, {0.99, false}, {-1, true}, {2, false}} {
		if got := th.Reject(10, 2, c.u); got != c.want {
			t.Errorf("Reject(10, 2, %v) = %v, want %v (p %.4f)", c.u, got, c.want, p)
		}
	}
	if th.Reject(10, 10, 0) {
		t.Error("a target that accepts everything is throttled")
	}
}

func TestThrottledErrorForms(t *testing.T) {
	e := &breaker.ThrottledError{Target: "http://a:80", Level: criticality.Sheddable, Probability: 0.625, RetryAfter: 3 * time.Second}
	if !errors.Is(e, breaker.ErrThrottled) || errors.Is(e, breaker.ErrOpen) {
		t.Fatalf("%v: Is ErrThrottled %v, Is ErrOpen %v", e, errors.Is(e, breaker.ErrThrottled), errors.Is(e, breaker.ErrOpen))
	}
	if got, ok := breaker.IsThrottled(e); !ok || got != e {
		t.Fatal("IsThrottled")
	}
	st := status.Convert(e)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("code %v", st.Code())
	}
	if d, found, err := pushback.RetryInfoDelay(st); !found || err != nil || d != 3*time.Second {
		t.Fatalf("RetryInfo %v %v %v", d, found, err)
	}
	const want = "http://a:80: throttled, the target refuses for load: sheddable calls refused locally with probability 0.62 (call not sent)"
	if e.Error() != want {
		t.Fatalf("message %q", e.Error())
	}
}

func TestClassifyThrottledIsNeutral(t *testing.T) {
	e := &breaker.ThrottledError{Target: "t", RetryAfter: time.Second}
	for _, grpc := range []bool{false, true} {
		if o := breaker.Classify(breaker.Result{GRPC: grpc, Err: e}); o != breaker.Neutral {
			t.Errorf("GRPC %v: %v, want neutral (refused before sending)", grpc, o)
		}
	}
}

// throttleLevel returns the throttle's state of level l in target's circuit.
func throttleLevel(t *testing.T, b *breaker.Breaker, target string, l criticality.Level) breaker.ThrottleLevel {
	t.Helper()
	c, ok := b.Circuit(target)
	if !ok || len(c.Throttle) != 4 {
		t.Fatalf("circuit %q: %v %+v", target, ok, c)
	}
	for _, tl := range c.Throttle {
		if tl.Level == l {
			return tl
		}
	}
	t.Fatalf("no level %v", l)
	return breaker.ThrottleLevel{}
}

// refusing is a RoundTripper that refuses every request for load (503, Retry-After)
// while refuse is set, and accepts it otherwise, counting what it is sent.
type refusing struct {
	refuse bool
	sent   int
}

func (r *refusing) RoundTrip(req *http.Request) (*http.Response, error) {
	r.sent++
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}
	if r.refuse {
		resp.StatusCode = 503
		resp.Header.Set(pushback.RetryAfterKey, "1")
	}
	return resp, nil
}

func TestThrottleWindowForgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := &refusing{refuse: true}
		b := breaker.New(breaker.WithAdaptiveThrottling(breaker.DefaultThrottle)) // 30 s in steps of 3 s
		client := &http.Client{Transport: b.Transport(rt)}
		send := func() error {
			req, _ := http.NewRequestWithContext(criticality.With(context.Background(), criticality.Sheddable), "GET", "http://a.test/", nil)
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			return err
		}
		for range 50 {
			if err := send(); err != nil && !errors.Is(err, breaker.ErrThrottled) {
				t.Fatal(err)
			}
		}
		const target = "http://a.test:80"
		tl := throttleLevel(t, b, target, criticality.Sheddable)
		if tl.Requests != 50 || tl.Accepts != 0 || tl.Probability < 0.9 {
			t.Fatalf("after 50 refused or throttled calls: %+v", tl)
		}
		// The refusals count for the whole window: 27 s on, still all there.
		time.Sleep(breaker.DefaultThrottle.Window - 3*time.Second)
		if got := throttleLevel(t, b, target, criticality.Sheddable); got != tl {
			t.Fatalf("27 s on: %+v, want %+v", got, tl)
		}
		// 30 s after they were counted, they have left the window, and the server,
		// recovered, gets the next call.
		rt.refuse = false
		time.Sleep(3 * time.Second)
		if got := throttleLevel(t, b, target, criticality.Sheddable); got.Requests != 0 || got.Probability != 0 {
			t.Fatalf("30 s on: %+v, want nothing", got)
		}
		sent := rt.sent
		if err := send(); err != nil || rt.sent != sent+1 {
			t.Fatalf("a call after the window: %v (%d sent)", err, rt.sent-sent)
		}
	})
}

// The throttle's own refusals of a level count as requests until the target has
// accepted 10 calls of it in a row (K = 2) and refused none of it, nor of a level
// above, in a whole bucket: then they leave the window, and the target's answers
// stay.
func TestThrottleForgetsItsOwnRefusalsOnceTheTargetAccepts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := &refusing{refuse: true}
		// u is the throttle's draw: 0 refuses whenever the probability is above 0.
		u := 0.0
		b := breaker.New(breaker.WithAdaptiveThrottling(breaker.DefaultThrottle), // 30 s in steps of 3 s
			breaker.WithRandom(func() float64 { return u }))
		client := &http.Client{Transport: b.Transport(rt)}
		send := func(l criticality.Level, n int) {
			for range n {
				req, _ := http.NewRequestWithContext(criticality.With(context.Background(), l), "GET", "http://a.test/", nil)
				resp, err := client.Do(req)
				if err != nil && !errors.Is(err, breaker.ErrThrottled) {
					t.Fatal(err)
				}
				if err == nil {
					resp.Body.Close()
				}
			}
		}
		const target = "http://a.test:80"
		want := func(when string, requests, accepts int) {
			t.Helper()
			if got := throttleLevel(t, b, target, criticality.Sheddable); got.Requests != requests || got.Accepts != accepts {
				t.Fatalf("%s: %+v, want %d requests, %d accepts", when, got, requests, accepts)
			}
		}
		// Ten sheddable calls sent and refused (MinRequests), 40 refused locally.
		send(criticality.Sheddable, 50)
		want("overloaded", 50, 0)
		rt.refuse, u = false, 0.9999
		// 9 accepted: too few.
		send(criticality.Sheddable, 9)
		time.Sleep(3 * time.Second)
		want("9 accepts", 59, 9)
		// A refusal, then 10 accepted, in one bucket: the bucket was not clean.
		rt.refuse = true
		send(criticality.Sheddable, 1)
		rt.refuse = false
		send(criticality.Sheddable, 10)
		time.Sleep(3 * time.Second)
		want("a refusal in the bucket", 70, 19)
		// One more, then a critical call refused: refused above, the run starts over.
		send(criticality.Sheddable, 1)
		rt.refuse = true
		send(criticality.Critical, 1)
		rt.refuse = false
		time.Sleep(3 * time.Second)
		want("a refusal above", 71+1, 20)
		// Critical accepts say nothing of sheddable calls; 10 sheddable in a row, the
		// bucket clean: the 40 local refusals leave, the target's 12 refusals (one
		// above) and 30 accepts stay.
		send(criticality.Critical, 5)
		send(criticality.Sheddable, 10)
		want("before the bucket ends", 82, 30)
		time.Sleep(3 * time.Second)
		want("the bucket clean", 12+30, 30)
	})
}

// A caller with nothing in its window is not throttled on the target's first
// refusal: the retry of a lone call after "come back in" is sent whatever the draw.
// Once the window holds MinRequests requests of the level (10 by default), all
// refused, the throttle refuses.
func TestThrottleWaitsForEvidence(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []breaker.Option
		sent int // calls sent of 20 asked, all refused by the target, with a draw of 0
	}{
		{"defaults", nil, 10},
		{"MinRequests 3", []breaker.Option{breaker.WithAdaptiveThrottling(breaker.Throttle{MinRequests: 3})}, 3},
		{"MinRequests 1: the bare formula", []breaker.Option{breaker.WithAdaptiveThrottling(breaker.Throttle{MinRequests: 1})}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rt := &refusing{refuse: true}
				// A draw of 0 refuses whenever the probability is above 0.
				b := breaker.New(append(c.opts, breaker.WithRandom(func() float64 { return 0 }))...)
				client := &http.Client{Transport: b.Transport(rt)}
				throttled, sentAfter := getThrottled(t, client, 20)
				if sentAfter != 0 {
					t.Fatalf("%d calls sent after the first throttled", sentAfter)
				}
				if rt.sent != c.sent || throttled != 20-c.sent {
					t.Fatalf("%d sent, %d throttled; want %d sent, the rest throttled", rt.sent, throttled, c.sent)
				}
			})
		})
	}
}

// getThrottled sends n GETs through client, one after another, and returns how
// many the throttle refused and how many were sent after its first refusal.
func getThrottled(t *testing.T, client *http.Client, n int) (throttled, sentAfter int) {
	t.Helper()
	for range n {
		resp, err := client.Get("http://a.test/")
		switch {
		case errors.Is(err, breaker.ErrThrottled):
			throttled++
		case err != nil:
			t.Fatal(err)
		default:
			resp.Body.Close()
			if throttled != 0 {
				sentAfter++
			}
		}
	}
	return throttled, sentAfter
}

// halfRefusing accepts requests to /a and refuses those to /r for load.
type halfRefusing struct{}

func (halfRefusing) RoundTrip(req *http.Request) (*http.Response, error) {
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}
	if req.URL.Path == "/r" {
		resp.StatusCode = 503
		resp.Header.Set(pushback.RetryAfterKey, "1")
	}
	return resp, nil
}

// Accepts are counted without the throttle's lock, refusals under it: from many
// goroutines at once, the window holds every one of them, in the bucket of its
// time, and lets them go with it.
func TestThrottleCountsConcurrentAnswersExactly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A draw of 1 never refuses: every call is sent, whatever the goroutines' order.
		b := breaker.New(breaker.WithRandom(func() float64 { return 1 }))
		client := &http.Client{Transport: b.Transport(halfRefusing{})}
		send := func(path string) {
			req, _ := http.NewRequestWithContext(criticality.With(context.Background(), criticality.Critical), "GET", "http://a.test"+path, nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
		}
		round := func(goroutines, each int, paths ...string) {
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for range each {
						send(paths[g%len(paths)])
					}
				})
			}
			wg.Wait()
		}
		const target = "http://a.test:80"
		want := func(when string, requests, accepts int) {
			t.Helper()
			if got := throttleLevel(t, b, target, criticality.Critical); got.Requests != requests || got.Accepts != accepts {
				t.Fatalf("%s: %+v, want %d requests, %d accepts", when, got, requests, accepts)
			}
		}
		round(8, 50, "/a", "/r")       // not read until the window has moved on
		<-time.After(27 * time.Second) // the last bucket of the window
		round(4, 25, "/a")
		want("two buckets", 500, 300)
		<-time.After(3 * time.Second) // the first bucket leaves
		want("the first gone", 100, 100)
		<-time.After(time.Minute) // no call: everything leaves
		round(2, 5, "/a")
		want("after a quiet minute", 10, 10)
	})
}
