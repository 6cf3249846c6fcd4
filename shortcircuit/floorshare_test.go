package shortcircuit_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"

	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// How much of what the learned floor refuses would have finished? Each route below
// gets a stream of requests (Poisson arrivals, fixed seeds, fake time): half with a
// generous budget, half with one drawn around the route's durations. Every request
// the guard refuses is run anyway, outside the guard, with the budget it had, and
// counted as one that would have finished if its handler succeeds before its
// deadline. The learned floor in force (the default) must refuse only what has a
// small chance to finish: of what it refuses, at most 5% would have, and at most 5%
// of what it refuses within a fifth of the floor. It must stay so with a concurrency
// limit: one never full (WithMaxConcurrency(1000)), and one sometimes full, where
// the bound holds for what is refused with no wait predicted (a slot free, or
// refused whatever the slots); what the queue refuses (a wait predicted, or after
// waiting) is logged apart. The median of the route's durations, the floor of
// earlier versions, is measured beside it; the figures are logged, with the price
// of a lower floor: the admitted requests that did not finish, cut at their
// deadline (go test -v -run TestLearnedFloorRefusesOnlyWhatCannotFinish
// ./shortcircuit).
func TestLearnedFloorRefusesOnlyWhatCannotFinish(t *testing.T) {
	for _, r := range routeModels {
		rules := []struct {
			name  string
			opts  []shortcircuit.Option
			bound bool // held to the 5% bound
		}{
			{"median (earlier versions)", []shortcircuit.Option{shortcircuit.WithAdaptiveFloor(shortcircuit.Adaptive{Quantile: 0.5})}, false},
			{"default", nil, true},
			{"default, limit 1000", []shortcircuit.Option{shortcircuit.WithMaxConcurrency(1000)}, true},
			{fmt.Sprintf("default, limit %d", r.limit), []shortcircuit.Option{shortcircuit.WithMaxConcurrency(r.limit)}, true},
		}
		for _, rule := range rules {
			var s floorShare
			synctest.Test(t, func(t *testing.T) { s = r.run(t, rule.opts) })
			t.Logf("%-9s %-25s floor %5.1fms: refused %4d of %4d short-budget requests, %3d would have finished (%4.1f%%); "+
				"within 20%% of the floor %3d of %3d (%4.1f%%); of those admitted, %3d did not finish; "+
				"queued %4d, refused by the queue %3d, %3d would have finished",
				r.name, rule.name, float64(s.floor)/1e6, s.refused, s.offered, s.wouldFinish, s.share()*100,
				s.nearFinish, s.near, 100*s.nearShare(), s.admittedLate, s.queued, s.queueRefused, s.queueWouldFinish)
			if rule.bound {
				if s.share() > 0.05 || s.nearShare() > 0.05 {
					t.Errorf("%s, %s: %d of the %d requests refused with no wait predicted would have finished (%.1f%%), %d of the %d within a fifth of the floor (%.1f%%); want at most 5%%",
						r.name, rule.name, s.wouldFinish, s.refused, s.share()*100, s.nearFinish, s.near, s.nearShare()*100)
				}
				if s.refused < s.offered/20 {
					t.Errorf("%s, %s: %d of %d short-budget requests refused with no wait predicted; want the floor to refuse what cannot finish", r.name, rule.name, s.refused, s.offered)
				}
			}
		}
	}
}

// floorShare is what one run measured, over the requests with a short budget.
type floorShare struct {
	// refused: with no wait predicted (below the floor, or the limit's refusal
	// with a slot free); queueRefused: by the queue (a wait predicted, or after
	// waiting: cannot finish, dropped, overloaded).
	offered, refused, wouldFinish, admittedLate int
	queued, queueRefused, queueWouldFinish      int
	// near: refused with at least 80% of the floor left, and how many of them
	// would have finished.
	near, nearFinish int
	floor            time.Duration // the floor of the last refusal
}

func (s floorShare) share() float64     { return float64(s.wouldFinish) / float64(max(s.refused, 1)) }
func (s floorShare) nearShare() float64 { return float64(s.nearFinish) / float64(max(s.near, 1)) }

// routeModel is a route: how its requests arrive, what budgets they carry, and the
// handler that serves them (in fake time, given the request's random draw).
type routeModel struct {
	name     string
	requests int
	limit    int                            // a concurrency limit that is sometimes full
	gap      time.Duration                  // mean time between arrivals
	budget   func(*rand.Rand) time.Duration // a short budget
	// handler returns the route's handler: it serves a request with a draw of
	// the standard normal distribution.
	handler func() func(ctx context.Context, draw float64) error
}

var routeModels = []routeModel{
	{
		// A handler whose durations are lognormal: median 20 ms, σ 0.5 (P5 8.8 ms,
		// P95 45 ms). Short budgets: log-uniform from 6 to 40 ms.
		name: "lognormal", requests: 3000, gap: 2 * ms, limit: 12,
		budget: logUniform(6*ms, 40*ms),
		handler: func() func(context.Context, float64) error {
			return func(ctx context.Context, z float64) error {
				return spendFor(ctx, time.Duration(float64(20*ms)*math.Exp(0.5*z)))
			}
		},
	},
	{
		// A gateway: 1 ms of its own work around a call to a downstream that
		// serves 2 at a time, 4 ms each (lognormal, σ 0.25), first come first
		// served, at 86% of its capacity: the gateway's durations are mostly the
		// downstream's queue. Short budgets: log-uniform from 2 to 60 ms.
		name: "gateway", requests: 4000, gap: 2200 * time.Microsecond, limit: 8,
		budget: logUniform(2*ms, 60*ms),
		handler: func() func(context.Context, float64) error {
			slots := make(chan struct{}, 2) // a channel's senders queue in order
			return func(ctx context.Context, z float64) error {
				if err := spendFor(ctx, ms/2); err != nil {
					return err
				}
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					return ctx.Err()
				}
				err := spendFor(ctx, time.Duration(float64(4*ms)*math.Exp(0.25*z)))
				<-slots
				if err != nil {
					return err
				}
				return spendFor(ctx, ms/2)
			}
		},
	},
}

// spendFor takes d of fake time, or fails when ctx ends first.
func spendFor(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func logUniform(lo, hi time.Duration) func(*rand.Rand) time.Duration {
	return func(rng *rand.Rand) time.Duration {
		return time.Duration(float64(lo) * math.Pow(float64(hi)/float64(lo), rng.Float64()))
	}
}

type eventKey struct{}

// run offers the route's requests to a guard with opts, in the running bubble.
func (r routeModel) run(t *testing.T, opts []shortcircuit.Option) floorShare {
	rng := rand.New(rand.NewPCG(37, 4))
	handler := r.handler()
	guard := shortcircuit.UnaryServerInterceptor(append(opts, shortcircuit.WithObserver(func(ctx context.Context, e shortcircuit.Event) {
		*ctx.Value(eventKey{}).(*shortcircuit.Event) = e
	}))...)
	info := &grpc.UnaryServerInfo{FullMethod: "/shop.Gateway/" + r.name}
	var (
		mu sync.Mutex
		s  floorShare
		wg sync.WaitGroup
	)
	for range r.requests {
		<-time.After(time.Duration(rng.ExpFloat64() * float64(r.gap)))
		budget, short := time.Second, rng.IntN(2) == 0
		if short {
			budget = r.budget(rng)
		}
		z := rng.NormFloat64()
		wg.Go(func() {
			var e shortcircuit.Event
			ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), eventKey{}, &e), budget)
			defer cancel()
			ran := false
			_, err := guard(ctx, nil, info, func(ctx context.Context, _ any) (any, error) {
				ran = true
				return nil, handler(ctx, z)
			})
			refused, finished := !ran, ran && err == nil
			if refused { // run it anyway, with the time it had
				finished = handler(ctx, z) == nil
			}
			if !short {
				if !finished {
					t.Errorf("a request with %v left did not finish: %v", budget, err)
				}
				return
			}
			mu.Lock()
			defer mu.Unlock()
			s.offered++
			if e.Queued {
				s.queued++
			}
			switch {
			case refused && (e.Queued || e.Wait > 0):
				s.queueRefused++
				if finished {
					s.queueWouldFinish++
				}
			case refused:
				s.refused++
				s.floor = e.Floor
				near := e.Remaining >= e.Floor*8/10
				if near {
					s.near++
				}
				if finished {
					s.wouldFinish++
					if near {
						s.nearFinish++
					}
				}
			case !finished:
				s.admittedLate++
			}
		})
	}
	wg.Wait()
	return s
}

// A slot given to a request that cannot finish is taken from one that would: under
// overload the limit must not spend its slots on work the deadline cuts, however
// little its free-slot rule refuses. A handler with 12 slots of a resource (beyond
// them it waits inside) and the lognormal route's work (median 20 ms: about 530 a
// second) is offered twice and four times that (Poisson, fixed seed, fake time),
// half the requests with 200 ms, half with the route's short budgets (6–40 ms),
// behind a static limit of 12 and the adaptive limit. The slot time of the
// requests cut at their deadline must be at most 5% of the slots' time, and under
// the static limit the answers in time at least 85% of the capacity. (The adaptive
// limit's goodput is logged, not held: over a 4 s run it depends on how soon the
// limit settles, which the order of goroutines waking at one fake instant moves:
// 61–96% at 2×.) go test -v -run TestALimitSpendsLittleOnWhatCannotFinish
// ./shortcircuit
func TestALimitSpendsLittleOnWhatCannotFinish(t *testing.T) {
	const slots, capacity = 12, 530 // per second: 12 slots over a mean of 22.7 ms
	for _, load := range []int{2, 4} {
		for _, lim := range []struct {
			name string
			opt  shortcircuit.Option
		}{
			{"static", shortcircuit.WithMaxConcurrency(slots)},
			{"adaptive", shortcircuit.WithAdaptiveConcurrency(shortcircuit.DefaultAdaptiveLimit)},
		} {
			var g overloadRun
			synctest.Test(t, func(t *testing.T) {
				g = runOverload(lim.opt, slots, time.Second/time.Duration(load*capacity), 4000)
			})
			goodput, wasted := g.goodput(), g.wastedShare(slots)
			t.Logf("%d× capacity, %-8s limit: %3.0f answers in time a second (%2.0f%% of capacity; %4d short-budget, %4d long), %4d cut at their deadline (%.1f%% of the slots' time), %4d refused",
				load, lim.name, goodput, 100*goodput/capacity, g.okShort, g.okLong, g.cut, 100*wasted, g.refused)
			if wasted > 0.05 {
				t.Errorf("%d× capacity, %s limit: %.1f%% of the slots' time on requests cut at their deadline; want at most 5%%", load, lim.name, 100*wasted)
			}
			if lim.name == "static" && goodput < 0.85*capacity {
				t.Errorf("%d× capacity, static limit: %.0f answers in time a second; want at least %.0f", load, goodput, 0.85*capacity)
			}
		}
	}
}

// overloadRun is what one overloaded run measured.
type overloadRun struct {
	okShort, okLong, cut, refused int
	wasted, elapsed               time.Duration
}

func (g overloadRun) goodput() float64 {
	return float64(g.okShort+g.okLong) / g.elapsed.Seconds()
}

func (g overloadRun) wastedShare(slots int) float64 {
	return float64(g.wasted) / float64(time.Duration(slots)*g.elapsed)
}

// runOverload offers n requests, one every gap on average, to a guard with the
// limit lim over a handler with the given slots of a resource, in the running
// bubble.
func runOverload(lim shortcircuit.Option, slots int, gap time.Duration, n int) overloadRun {
	rng := rand.New(rand.NewPCG(37, 4))
	resource := make(chan struct{}, slots)
	guard := shortcircuit.UnaryServerInterceptor(lim)
	info := &grpc.UnaryServerInfo{FullMethod: "/shop.Stock/Get"}
	var (
		mu sync.Mutex
		g  overloadRun
		wg sync.WaitGroup
	)
	start := time.Now()
	for range n {
		<-time.After(time.Duration(rng.ExpFloat64() * float64(gap)))
		budget, short := 200*ms, rng.IntN(2) == 0
		if short {
			budget = routeModels[0].budget(rng)
		}
		z := rng.NormFloat64()
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			ran := false
			var took time.Duration
			_, err := guard(ctx, nil, info, func(ctx context.Context, _ any) (any, error) {
				ran = true
				select {
				case resource <- struct{}{}:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				defer func() { <-resource }()
				began := time.Now()
				err := spendFor(ctx, time.Duration(float64(20*ms)*math.Exp(0.5*z)))
				took = time.Since(began)
				return nil, err
			})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case !ran:
				g.refused++
			case err != nil:
				g.cut++
				g.wasted += took
			case short:
				g.okShort++
			default:
				g.okLong++
			}
		})
	}
	wg.Wait()
	g.elapsed = time.Since(start)
	return g
}
