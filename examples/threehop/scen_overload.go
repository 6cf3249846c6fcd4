package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// The overload scenario: C has a resource of 4 slots (a connection pool, a worker
// pool) and each request holds one for 10 ms of work that does not watch its context
// (a CPU-bound step, a driver call without one): C serves 400 requests a second. B
// offers it twice that for 2 s, an open loop (Poisson arrivals, a seeded draw, each
// with a budget of 100 ms), through deadlinekit.NewTransport. Without a guard every
// request waits for a slot in a growing line, and C works for callers long gone; with
// C behind deadlinekit.NewHandler and a concurrency limit of 4
// (deadlinekit.WithShortCircuit(shortcircuit.WithMaxConcurrency(4))), C admits only
// what it can finish in time and refuses the rest at once. B's client has the
// breaker too, as the stack does by default: without C's guard, C's timeouts open it
// and B stops calling C for a while; C's "come back" refusals do not.
//
// The readings come from the services: B records what it got and when; C records,
// for each request its handler served, how long it held a slot and whether the
// request's deadline had passed when the work ended (wasted work), and its time from
// arrival to answer.
var olDemo = olShape{slots: 4, work: 10 * time.Millisecond, budget: 100 * time.Millisecond, duration: 2 * time.Second}

// olShape is one overload run's numbers: C's slots and the work each request holds
// one for, B's budget per request, and how long B offers twice C's capacity.
type olShape struct {
	slots        int
	work, budget time.Duration
	duration     time.Duration
}

// capacity is what C's slots serve per second.
func (s olShape) capacity() float64 { return float64(s.slots) * float64(time.Second) / float64(s.work) }

// rate is B's arrival rate, per second: twice the capacity.
func (s olShape) rate() float64 { return 2 * s.capacity() }

// olService is C: its slots, the work blind to its context.
type olService struct {
	work   time.Duration
	slots  chan struct{}
	inside sync.WaitGroup // handlers running

	mu               sync.Mutex
	busy, wasted     time.Duration
	admittedLatency  []time.Duration // arrival to answer, of the requests that got a 200
	worked, overdone int
}

func (c *olService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.inside.Add(1)
	defer c.inside.Done()
	arrived := time.Now()
	c.slots <- struct{}{} // waits however long it takes: nothing here watches the context
	start := time.Now()
	time.Sleep(c.work) //deadlinevet:detached this server shows what a queue that ignores deadlines costs
	<-c.slots
	end := time.Now()
	late := r.Context().Err() != nil
	c.mu.Lock()
	c.busy += end.Sub(start)
	c.worked++
	if late {
		c.wasted += end.Sub(start)
		c.overdone++
	} else {
		c.admittedLatency = append(c.admittedLatency, end.Sub(arrived))
	}
	c.mu.Unlock()
	if late {
		writeResult(w, r.Context().Err())
		return
	}
	w.WriteHeader(http.StatusOK)
}

// olRun is what one run measured.
type olRun struct {
	offered, inTime, refused, late int
	circuitOpen                    int
	throttled                      int // B's own throttle: C refused most of what it was sent
	refusedTook                    []time.Duration
	c                              *olService
	guard                          shortcircuit.Stats // C's guard's own count
}

func runOverload(e *env) ([]reading, error) {
	var runs [2]olRun
	for i, guarded := range []bool{false, true} {
		r, err := runOverloadOnce(e, olDemo, guarded)
		if err != nil {
			return nil, err
		}
		runs[i] = r
	}
	goodput := func(r olRun) string {
		per := float64(r.inTime) / olDemo.duration.Seconds()
		return fmt.Sprintf("%.0f/s (%.0f%% of %.0f/s)", per, 100*per/olDemo.capacity(), olDemo.capacity())
	}
	wasted := func(r olRun) string {
		r.c.mu.Lock()
		defer r.c.mu.Unlock()
		if r.c.busy == 0 {
			return "no work"
		}
		return fmt.Sprintf("%.0f%% (%d of %d requests)", 100*float64(r.c.wasted)/float64(r.c.busy), r.c.overdone, r.c.worked)
	}
	p99 := func(r olRun) string {
		r.c.mu.Lock()
		defer r.c.mu.Unlock()
		if len(r.c.admittedLatency) == 0 {
			return "none answered in time"
		}
		return msPrecise(percentile(r.c.admittedLatency, 0.99))
	}
	refusals := func(r olRun) string {
		if r.guard.Refused() == 0 {
			return "none"
		}
		s := fmt.Sprintf("%d; B failed %d calls on them, median %s", r.guard.Refused(), r.refused, short(median(r.refusedTook)))
		if r.throttled > 0 {
			s += fmt.Sprintf("; B's throttle kept %d from C", r.throttled)
		}
		return s
	}
	late := func(r olRun) string { return fmt.Sprintf("%d of %d", r.late, r.offered) }
	open := func(r olRun) string { return fmt.Sprintf("%d of %d", r.circuitOpen, r.offered) }
	return []reading{
		{"overload", fmt.Sprintf("answers in time, C offered 2× its capacity for %s", seconds(olDemo.duration)), goodput(runs[0]), goodput(runs[1])},
		{"", "C's work for callers already gone", wasted(runs[0]), wasted(runs[1])},
		{"", "C's p99, arrival to answer, of what it answered in time", p99(runs[0]), p99(runs[1])},
		{"", "refused by C before its handler ran", refusals(runs[0]), refusals(runs[1])},
		{"", "B's calls with no answer by their deadline", late(runs[0]), late(runs[1])},
		{"", "B's calls refused by its own breaker (C timing out)", open(runs[0]), open(runs[1])},
	}, nil
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(int(p*float64(len(s))), len(s)-1)]
}

func runOverloadOnce(e *env, shape olShape, guarded bool) (olRun, error) {
	c := &olService{work: shape.work, slots: make(chan struct{}, shape.slots)}
	var counter shortcircuit.Counter
	opts := []deadlinekit.Option{deadlinekit.WithShortCircuit(shortcircuit.WithObserver(counter.Observe))}
	variant := "without a guard"
	if guarded {
		opts = append(opts, deadlinekit.WithShortCircuit(shortcircuit.WithMaxConcurrency(shape.slots)))
		variant = "with C's concurrency limit"
	}
	cURL, stop, err := serveHTTP(e.tel.serverHandler(svcC, deadlinekit.NewHandler(c, opts...)))
	if err != nil {
		return olRun{}, err
	}
	defer stop()
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 256
	defer base.CloseIdleConnections()
	// B's client as the README wires one; retries of C's "come back" refusals and
	// hedges are part of what C is offered.
	client := &http.Client{Transport: e.tel.transport(svcB, deadlinekit.NewTransport(base))}

	run := olRun{c: c}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var traced [2]sync.Once
	rng := rand.New(rand.NewPCG(7, 7))
	start := time.Now()
	fmt.Fprintf(e.verbose, "  overload, %s: %.0f requests/s for %s\n", variant, shape.rate(), seconds(shape.duration))
	for at := time.Duration(0); at < shape.duration; at += time.Duration(rng.ExpFloat64() / shape.rate() * float64(time.Second)) {
		if d := at - time.Since(start); d > 0 {
			time.Sleep(d)
		}
		run.offered++
		wg.Go(func() {
			ctx, root := e.tel.provider(svcB).Tracer("threehop").Start(context.Background(), "overload, "+variant)
			ctx, cancel := context.WithTimeout(ctx, shape.budget)
			t0 := time.Now()
			err := httpGet(ctx, client, cURL)
			took := time.Since(t0)
			cancel()
			status := deadlinekit.HTTPStatus(err) // what B would answer its own caller
			mu.Lock()
			_, open := breaker.IsOpen(err)
			_, throttled := breaker.IsThrottled(err)
			switch {
			case err == nil && took < shape.budget:
				run.inTime++
			case open:
				run.circuitOpen++ // B's own breaker: C looked dead
			case throttled:
				run.throttled++ // B's own throttle: C refused most of what it was sent
			case status == http.StatusServiceUnavailable:
				// C's "come back in X": B's retry layer waited it when it fit and its
				// retry budget allowed, then gave up.
				run.refused++
				run.refusedTook = append(run.refusedTook, took)
			default:
				run.late++
			}
			mu.Unlock()
			var outcome string
			switch {
			case err == nil:
				outcome = "answered in " + short(took)
			case open:
				outcome = "refused by B's open circuit in " + short(took)
			case throttled:
				outcome = "not sent: B's throttle (C refuses for load), in " + short(took)
			case status == http.StatusServiceUnavailable:
				outcome = "C refused it (503, come back later); B gave up after " + short(took)
			default:
				outcome = clientSaw(err) + " after " + short(took)
			}
			root.SetName("overload, " + variant + ": " + outcome)
			root.End()
			switch {
			case guarded && !throttled && status == http.StatusServiceUnavailable:
				traced[0].Do(func() { e.trace("overload: a request C refused at once", root) })
			case !guarded && err != nil && !open && took >= shape.budget/2:
				traced[1].Do(func() { e.trace("overload: without a guard, a request that waited past its deadline", root) })
			}
		})
	}
	wg.Wait()
	// C's handlers may still be working for callers long gone (without a guard, a
	// backlog of about as many requests as it served): the readings include that
	// work.
	c.inside.Wait()
	run.guard = counter.Stats()
	fmt.Fprintf(e.verbose, "  overload, %s: %d offered, %d answered in time, %d refused, %d late\n", variant, run.offered, run.inTime, run.refused, run.late)
	return run, nil
}
