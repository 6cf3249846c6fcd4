package admissioncmp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/priority"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// ChainVariant is one way of building the chain's three hops.
type ChainVariant struct {
	// Name names it in the RESULT lines (no spaces).
	Name string
	// Note says exactly how it is configured.
	Note string
	// Build returns fresh hops for one run over a backend of workers slots; lost
	// records where critical requests were lost.
	Build func(workers int, lost *losses) ChainStack
}

// ChainStack is one run's layers around the chain's handlers.
type ChainStack struct {
	// Gateway, Service and Backend wrap each server's handler.
	Gateway, Service, Backend func(http.Handler) http.Handler
	// GatewayClient and ServiceClient wrap the h2c transport the gateway and the
	// service call their next hop with.
	GatewayClient, ServiceClient func(http.RoundTripper) http.RoundTripper
	// Relay answers for a call that failed: the client's error, or an answer that is
	// not 2xx (the hop then reads and closes its body).
	Relay func(w http.ResponseWriter, resp *http.Response, err error)
	// Why names a failure of a hop's own client, for the losses ("": don't note).
	Why func(error) string
	// Close releases what the run started (nil: nothing).
	Close func()
}

func (s ChainStack) close() {
	if s.Close != nil {
		s.Close()
	}
}

// edgeLevel is the gateway's criticality function: the level from the path.
func edgeLevel(r *http.Request) criticality.Level {
	if strings.HasPrefix(r.URL.Path, "/critical/") {
		return criticality.Critical
	}
	return criticality.Sheddable
}

// ChainVariants returns the chain cells' variants, in the order of the tables.
// The toolkit's clients throttle by default (package breaker's adaptive throttle):
// the "nothrottle" variants turn it off, so that the refusal work without it stays
// measured.
func ChainVariants() []ChainVariant {
	return []ChainVariant{
		{
			Name: "dk-crit-adaptive",
			Note: "deadlinekit.NewHandler at every hop, the gateway with WithEdge() and WithCriticality (path /critical/ critical, else sheddable), the backend with WithShortCircuit(WithAdaptiveConcurrency(DefaultAdaptiveLimit)); the gateway's and service's clients deadlinekit.NewTransport (defaults: retry, breaker with its adaptive throttle (DefaultThrottle: K = 2, 30 s), hedge, propagate)",
			Build: func(workers int, lost *losses) ChainStack {
				return dkStack(lost, true, shortcircuit.WithAdaptiveConcurrency(shortcircuit.DefaultAdaptiveLimit))
			},
		},
		{
			Name: "dk-crit-adaptive-nothrottle",
			Note: "dk-crit-adaptive with the throttle off on both clients: WithBreaker(breaker.WithoutAdaptiveThrottling())",
			Build: func(workers int, lost *losses) ChainStack {
				return dkStack(lost, true, shortcircuit.WithAdaptiveConcurrency(shortcircuit.DefaultAdaptiveLimit), noThrottle)
			},
		},
		{
			Name: "dk-crit-static",
			Note: "dk-crit-adaptive (clients' defaults, throttle on) with the backend's static limit at its capacity: WithMaxConcurrency(slots), the default queue (one per slot)",
			Build: func(workers int, lost *losses) ChainStack {
				return dkStack(lost, true, shortcircuit.WithMaxConcurrency(workers))
			},
		},
		{
			Name: "dk-crit-adaptive-notrip",
			Note: "dk-crit-adaptive with the circuits' trips off on both clients: WithBreaker(breaker.WithFailureRatio(1), breaker.WithConsecutiveFailures(0)): the throttle alone, no circuit opening on timeouts",
			Build: func(workers int, lost *losses) ChainStack {
				return dkStack(lost, true, shortcircuit.WithAdaptiveConcurrency(shortcircuit.DefaultAdaptiveLimit), noTrips)
			},
		},
		{
			Name: "dk-crit-adaptive-nothrottle-notrip",
			Note: "dk-crit-adaptive with the throttle and the circuits' trips off on both clients (as dk-crit-adaptive-nothrottle and dk-crit-adaptive-notrip): admission alone",
			Build: func(workers int, lost *losses) ChainStack {
				return dkStack(lost, true, shortcircuit.WithAdaptiveConcurrency(shortcircuit.DefaultAdaptiveLimit), noThrottle, noTrips)
			},
		},
		{
			Name: "dk-nocrit-adaptive",
			Note: "today's limit without levels: dk-crit-adaptive without WithCriticality (every request critical; clients' defaults, throttle on)",
			Build: func(workers int, lost *losses) ChainStack {
				return dkStack(lost, false, shortcircuit.WithAdaptiveConcurrency(shortcircuit.DefaultAdaptiveLimit))
			},
		},
		{
			Name:  "failsafe-prioritized",
			Note:  "failsafe-go v0.9.8: the gateway puts priority.High (critical) or priority.Low (sheddable) on the context from the path; every client failsafehttp.NewRoundTripperWithLevel, every server failsafehttp.NewHandlerWithLevel (the backend's ensureLevel true); the backend's adaptivelimiter.NewBuilder().BuildPrioritized(adaptivelimiter.NewPrioritizer()) (defaults: limit from 20 in [1, 200], queueing 2× then rejecting up to 3× the limit), calibrated every 100 ms, run per request with the request's context (failsafe.With(l).WithContext(r.Context())), 429 over its limit; deadlines carried by deadlinekit's propagate at every hop, no retries",
			Build: failsafeStack,
		},
	}
}

// noTrips keeps the clients' circuits closed whatever fails; noThrottle turns
// their adaptive throttle off.
var (
	noTrips    = deadlinekit.WithBreaker(breaker.WithFailureRatio(1), breaker.WithConsecutiveFailures(0))
	noThrottle = deadlinekit.WithBreaker(breaker.WithoutAdaptiveThrottling())
)

// dkStack is the toolkit's chain: crit sets the levels at the edge, limit is the
// backend's, client adds options to both clients.
func dkStack(lost *losses, crit bool, limit shortcircuit.Option, client ...deadlinekit.Option) ChainStack {
	edge := []deadlinekit.Option{deadlinekit.WithEdge()}
	if crit {
		edge = append(edge, deadlinekit.WithCriticality(edgeLevel))
	}
	observe := shortcircuit.WithObserver(func(ctx context.Context, e shortcircuit.Event) {
		if e.Admission != shortcircuit.Admitted {
			lost.lostAtBackend(ctx, e.Route, e.Admission.String())
		}
	})
	transport := func(base http.RoundTripper) http.RoundTripper { return deadlinekit.NewTransport(base, client...) }
	return ChainStack{
		Gateway: func(h http.Handler) http.Handler { return deadlinekit.NewHandler(h, edge...) },
		Service: func(h http.Handler) http.Handler { return deadlinekit.NewHandler(h) },
		Backend: func(h http.Handler) http.Handler {
			return deadlinekit.NewHandler(h, deadlinekit.WithShortCircuit(limit, observe))
		},
		GatewayClient: transport,
		ServiceClient: transport,
		Relay: func(w http.ResponseWriter, resp *http.Response, err error) {
			deadlinekit.WriteHTTPError(w, deadlinekit.FromHTTP(resp, err))
		},
		Why: func(err error) string {
			switch {
			case errors.Is(err, breaker.ErrThrottled):
				return "throttled"
			case errors.Is(err, breaker.ErrOpen):
				return "circuit open"
			case errors.Is(err, deadline.ErrInsufficientBudget):
				return "client's floor"
			case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
				return "" // the caller's deadline: the client counts it
			}
			return "error"
		},
	}
}

// failsafeStack is failsafe-go's chain: priorities from the edge, carried by its
// level handlers and round trippers, the prioritized adaptive limiter at the
// backend.
func failsafeStack(_ int, _ *losses) ChainStack {
	p := adaptivelimiter.NewPrioritizer()
	stop := p.ScheduleCalibrations(context.Background(), 100*time.Millisecond)
	l := adaptivelimiter.NewBuilder[*http.Response]().BuildPrioritized(p)
	limited := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			failsafehttp.NewHandlerWithExecutor(next, failsafe.With[*http.Response](l).WithContext(r.Context())).ServeHTTP(w, r)
		})
	}
	prioritize := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := priority.Low
			if isCritical(r) {
				p = priority.High
			}
			next.ServeHTTP(w, r.WithContext(priority.ContextWithPriority(r.Context(), p)))
		})
	}
	transport := func(base http.RoundTripper) http.RoundTripper {
		return failsafehttp.NewRoundTripperWithLevel(propagate.NewTransport(base))
	}
	return ChainStack{
		Gateway: func(h http.Handler) http.Handler { return propagate.NewMiddleware()(prioritize(h)) },
		Service: func(h http.Handler) http.Handler {
			return propagate.NewMiddleware()(failsafehttp.NewHandlerWithLevel(h, false))
		},
		Backend: func(h http.Handler) http.Handler {
			return propagate.NewMiddleware()(failsafehttp.NewHandlerWithLevel(limited(h), true))
		},
		GatewayClient: transport,
		ServiceClient: transport,
		Relay: func(w http.ResponseWriter, resp *http.Response, err error) {
			if err != nil {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			w.WriteHeader(resp.StatusCode)
		},
		Why: func(err error) string {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return ""
			}
			return "error"
		},
		Close: func() { stop() },
	}
}
