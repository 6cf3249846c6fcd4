// Package breakercmp compares HTTP circuit breakers on loopback: deadlinekit's
// breaker against sony/gobreaker v2 and failsafe-go's circuitbreaker, each at its
// documented defaults and at settings matched to deadlinekit's (20 failures in a
// row, or at least 20 calls and a failure ratio above 0.6 in a 10 s window; open for
// 5 s, one probe), on the same scripted
// scenarios: an outage under a steady open-loop load, a healthy downstream whose
// callers cancel early or arrive with starved budgets, and the cost of the closed
// path. cmd/breakerbench runs it and prints a markdown table.
package breakercmp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/sony/gobreaker/v2"

	"github.com/deadlinekit/deadlinekit/breaker"
)

// Matched settings: deadlinekit's defaults, with one probe and a fixed 5 s sleep.
const (
	MatchedConsecutive = 20
	MatchedMinCalls    = 20
	MatchedRatio       = 0.6
	MatchedWindow      = 10 * time.Second
	MatchedOpenFor     = 5 * time.Second
)

// Instance is one breaker around one base transport, with what the harness reads of it.
type Instance struct {
	// RT sends requests through the breaker.
	RT http.RoundTripper
	// State is the breaker's state: "closed", "open" or "half-open".
	State func() string
	// Opens is the number of times it opened.
	Opens func() int
	// Failures is the number of calls it counted as failures.
	Failures func() int
}

// Variant is a breaker configuration under test.
type Variant struct {
	Name string
	// Note says how it is configured, and what it cannot express.
	Note string
	// New makes a fresh breaker around base for the target host (host:port).
	New func(base http.RoundTripper, host string) Instance
}

// Refused reports whether err is a refusal by an open (or full half-open) breaker of
// any of the variants.
func Refused(err error) bool {
	return errors.Is(err, breaker.ErrOpen) || errors.Is(err, gobreaker.ErrOpenState) ||
		errors.Is(err, gobreaker.ErrTooManyRequests) || errors.Is(err, circuitbreaker.ErrOpen)
}

// Variants returns the configurations compared, deadlinekit's first.
func Variants() []Variant {
	return []Variant{
		{
			Name: "deadlinekit breaker, defaults",
			Note: "breaker.New().Transport(base): 20 failures in a row, or min calls 20 and failure ratio 0.6 in a window of 10 × 1 s; open 5 s (±20%, doubling to 300 s), 3 probes; cancellations and budgets below the target's median latency are neutral",
			New:  func(base http.RoundTripper, host string) Instance { return ours(base, host) },
		},
		{
			Name: "deadlinekit breaker, matched",
			Note: "as defaults, with breaker.WithProbes(1), breaker.WithSleep(breaker.Sleep{First: 5 s, Max: 5 s, Factor: 1}) (and the trips and window stated explicitly at their defaults)",
			New: func(base http.RoundTripper, host string) Instance {
				return ours(base, host, breaker.WithConsecutiveFailures(MatchedConsecutive), breaker.WithMinCalls(MatchedMinCalls), breaker.WithFailureRatio(MatchedRatio),
					breaker.WithWindow(MatchedWindow, 10), breaker.WithProbes(1),
					breaker.WithSleep(breaker.Sleep{First: MatchedOpenFor, Max: MatchedOpenFor, Factor: 1}))
			},
		},
		{
			Name: "sony/gobreaker v2.4.0, defaults",
			Note: "gobreaker.NewCircuitBreaker[*http.Response](gobreaker.Settings{}) around RoundTrip, a 5xx answer turned into an error (gobreaker sees only errors): opens after more than 5 consecutive failures, counts never cleared while closed (Interval 0), open 60 s, 1 probe; every error (cancellation, timeout) is a failure",
			New: func(base http.RoundTripper, _ string) Instance {
				return gobreakerInstance(base, gobreaker.Settings{})
			},
		},
		{
			Name: "sony/gobreaker v2.4.0, matched",
			Note: "Settings{Interval: 10 s, BucketPeriod: 1 s (rolling window), Timeout: 5 s, MaxRequests: 1, ReadyToTrip: 20 consecutive failures, or successes+failures ≥ 20 and failures/(successes+failures) > 0.6, IsExcluded: context.Canceled}: the caller's cancellation is excluded (what its users can do); a timeout cannot be told starved from fair, so every timeout is a failure",
			New: func(base http.RoundTripper, _ string) Instance {
				return gobreakerInstance(base, gobreaker.Settings{
					Interval:     MatchedWindow,
					BucketPeriod: time.Second,
					Timeout:      MatchedOpenFor,
					MaxRequests:  1,
					ReadyToTrip: func(c gobreaker.Counts) bool {
						if c.ConsecutiveFailures >= MatchedConsecutive {
							return true
						}
						n := c.TotalSuccesses + c.TotalFailures
						return n >= MatchedMinCalls && float64(c.TotalFailures)/float64(n) > MatchedRatio
					},
					IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
				})
			},
		},
		{
			Name: "failsafe-go v0.9.8 circuitbreaker, defaults",
			Note: "failsafehttp.NewRoundTripper(base, circuitbreaker.NewBuilder[*http.Response]().HandleIf(error or 5xx).Build()): count based, opens after 1 failure, closes after 1 success, open 1 min; every error (cancellation, timeout) is a failure",
			New: func(base http.RoundTripper, _ string) Instance {
				return failsafeInstance(base, func(b circuitbreaker.Builder[*http.Response]) circuitbreaker.Builder[*http.Response] {
					return b.HandleIf(func(r *http.Response, err error) bool { return err != nil || r != nil && r.StatusCode >= 500 })
				})
			},
		},
		{
			Name: "failsafe-go v0.9.8 circuitbreaker, matched (ratio)",
			Note: "WithFailureRateThreshold(0.6, 20, 10 s), WithDelay(5 s), WithSuccessThreshold(1), HandleIf(5xx, or an error other than context.Canceled): failsafe has no neutral outcome, so a cancellation not handled counts as a success; every timeout is a failure; a breaker has one threshold, so the run of failures is the next variant",
			New: func(base http.RoundTripper, _ string) Instance {
				return failsafeInstance(base, func(b circuitbreaker.Builder[*http.Response]) circuitbreaker.Builder[*http.Response] {
					return b.WithFailureRateThreshold(MatchedRatio, MatchedMinCalls, MatchedWindow).
						WithDelay(MatchedOpenFor).WithSuccessThreshold(1).
						HandleIf(func(r *http.Response, err error) bool {
							return err != nil && !errors.Is(err, context.Canceled) || r != nil && r.StatusCode >= 500
						})
				})
			},
		},
		{
			Name: "failsafe-go v0.9.8 circuitbreaker, matched (20 in a row)",
			Note: "WithFailureThreshold(20) (consecutive failures), WithDelay(5 s), WithSuccessThreshold(1), the same HandleIf",
			New: func(base http.RoundTripper, _ string) Instance {
				return failsafeInstance(base, func(b circuitbreaker.Builder[*http.Response]) circuitbreaker.Builder[*http.Response] {
					return b.WithFailureThreshold(MatchedConsecutive).
						WithDelay(MatchedOpenFor).WithSuccessThreshold(1).
						HandleIf(func(r *http.Response, err error) bool {
							return err != nil && !errors.Is(err, context.Canceled) || r != nil && r.StatusCode >= 500
						})
				})
			},
		},
	}
}

func ours(base http.RoundTripper, host string, opts ...breaker.Option) Instance {
	b := breaker.New(opts...)
	target := breaker.TargetName("http", host)
	return Instance{
		RT:       b.Transport(base),
		State:    func() string { return b.State(target).String() },
		Opens:    func() int { return int(b.Stats().Opens) },
		Failures: func() int { return int(b.Stats().Failures) },
	}
}

// errStatus is what the gobreaker wrapper returns to gobreaker for a 5xx answer; the
// caller gets the answer itself.
var errStatus = errors.New("breakercmp: 5xx answer")

type gobreakerRT struct {
	cb   *gobreaker.CircuitBreaker[*http.Response]
	base http.RoundTripper
}

func (t *gobreakerRT) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.cb.Execute(func() (*http.Response, error) {
		resp, err := t.base.RoundTrip(req)
		if err == nil && resp.StatusCode >= 500 {
			return resp, errStatus
		}
		return resp, err
	})
	if errors.Is(err, errStatus) {
		return resp, nil
	}
	if err != nil && resp != nil {
		resp.Body.Close()
		resp = nil
	}
	return resp, err
}

func gobreakerInstance(base http.RoundTripper, st gobreaker.Settings) Instance {
	var opens, failures atomic.Int64
	st.Name = "breakercmp"
	st.OnStateChange = func(_ string, _, to gobreaker.State) {
		if to == gobreaker.StateOpen {
			opens.Add(1)
		}
	}
	ok := st.IsSuccessful
	if ok == nil {
		ok = func(err error) bool { return err == nil }
	}
	st.IsSuccessful = func(err error) bool {
		if ok(err) {
			return true
		}
		failures.Add(1)
		return false
	}
	cb := gobreaker.NewCircuitBreaker[*http.Response](st)
	return Instance{
		RT: &gobreakerRT{cb: cb, base: base},
		State: func() string {
			switch cb.State() {
			case gobreaker.StateOpen:
				return "open"
			case gobreaker.StateHalfOpen:
				return "half-open"
			}
			return "closed"
		},
		Opens:    func() int { return int(opens.Load()) },
		Failures: func() int { return int(failures.Load()) },
	}
}

func failsafeInstance(base http.RoundTripper, configure func(circuitbreaker.Builder[*http.Response]) circuitbreaker.Builder[*http.Response]) Instance {
	var opens, failures atomic.Int64
	b := circuitbreaker.NewBuilder[*http.Response]().
		OnOpen(func(circuitbreaker.StateChangedEvent) { opens.Add(1) }).
		OnFailure(func(failsafe.ExecutionEvent[*http.Response]) { failures.Add(1) })
	cb := configure(b).Build()
	return Instance{
		RT: failsafehttp.NewRoundTripper(base, cb),
		State: func() string {
			switch cb.State() {
			case circuitbreaker.OpenState:
				return "open"
			case circuitbreaker.HalfOpenState:
				return "half-open"
			}
			return "closed"
		},
		Opens:    func() int { return int(opens.Load()) },
		Failures: func() int { return int(failures.Load()) },
	}
}

// String names a state list for tests and logs.
func (v Variant) String() string { return fmt.Sprintf("%s (%s)", v.Name, v.Note) }
