package breakercmp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"
)

// kind is what happened to one request, as its caller saw it.
type kind uint8

const (
	kindOK       kind = iota // a 200
	kindStatus               // another status (the outage's 503)
	kindRefused              // refused by the breaker, nothing sent
	kindCanceled             // context.Canceled
	kindDeadline             // context.DeadlineExceeded
	kindOther                // any other error
)

// plan is what a request was meant to be.
type plan uint8

const (
	planFair    plan = iota // a fair budget, waits for the answer
	planCancel              // the caller cancels before the answer
	planStarved             // a budget below the target's typical latency
	numPlans
)

type record struct {
	sent time.Duration // since the run's start
	took time.Duration
	plan plan
	kind kind
}

type event struct {
	at    time.Duration
	state string
}

// lane is one variant's client, breaker, downstream and records in a run.
type lane struct {
	v     Variant
	be    *backend
	inst  Instance
	base  *http.Transport
	c     *http.Client
	url   string
	start time.Time
	// cancelAfter is when a planCancel request's caller gives up.
	cancelAfter time.Duration

	mu      sync.Mutex
	records []record
	events  []event
	wg      sync.WaitGroup // requests in flight
}

func newLane(v Variant, delay time.Duration) *lane {
	be := newBackend(delay)
	base := &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: 30 * time.Second}
	inst := v.New(base, be.host())
	return &lane{v: v, be: be, inst: inst, base: base, c: &http.Client{Transport: inst.RT}, url: be.srv.URL + "/work"}
}

func (l *lane) close() {
	l.wg.Wait()
	l.base.CloseIdleConnections()
	l.be.close()
}

func (l *lane) since() time.Duration { return time.Since(l.start) }

// send makes one request with the given plan and budget, in a goroutine.
func (l *lane) send(p plan, budget time.Duration) {
	sent := l.since()
	l.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		if p == planCancel {
			t := time.AfterFunc(l.cancelAfter, cancel)
			defer t.Stop()
		}
		k := kindOther
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.url, nil)
		if err == nil {
			var resp *http.Response
			resp, err = l.c.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			switch {
			case err == nil && resp.StatusCode == http.StatusOK:
				k = kindOK
			case err == nil:
				k = kindStatus
			case Refused(err):
				k = kindRefused
			case errors.Is(err, context.Canceled):
				k = kindCanceled
			case errors.Is(err, context.DeadlineExceeded):
				k = kindDeadline
			}
		}
		r := record{sent: sent, took: l.since() - sent, plan: p, kind: k}
		l.mu.Lock()
		l.records = append(l.records, r)
		l.mu.Unlock()
	})
}

// watch reads the breaker's state every millisecond until stop is closed.
func (l *lane) watch(stop <-chan struct{}, done *sync.WaitGroup) {
	done.Go(func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		last := ""
		for {
			if s := l.inst.State(); s != last {
				l.mu.Lock()
				l.events = append(l.events, event{at: l.since(), state: s})
				l.mu.Unlock()
				last = s
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
}

// drive sends requests at rate per second from the lanes' start until stop is
// closed, each made by next(i) (its plan) at the i-th arrival, whatever the answers:
// an open loop.
func drive(l *lane, rate float64, stop <-chan struct{}, wg *sync.WaitGroup, next func(i int, at time.Duration) (plan, time.Duration)) {
	wg.Go(func() {
		period := time.Duration(float64(time.Second) / rate)
		for i := 0; ; i++ {
			at := time.Duration(i) * period
			if d := at - l.since(); d > 0 {
				select {
				case <-stop:
					return
				case <-time.After(d):
				}
			} else {
				select {
				case <-stop:
					return
				default:
				}
			}
			p, budget := next(i, at)
			l.send(p, budget)
		}
	})
}

// OutageConfig scripts an outage: Warmup of healthy traffic, then Outage with the
// downstream answering 503 at once, then recovery, watched for at most Cap (0: stop
// at the end of the outage), all under an open-loop load of Rate requests per second,
// each with budget Budget, to a downstream whose healthy answers take Delay.
type OutageConfig struct {
	Rate                float64
	Budget, Delay       time.Duration
	Warmup, Outage, Cap time.Duration
}

// OutageResult is what [RunOutage] measured of one variant. Durations are -1 when
// the event did not happen.
type OutageResult struct {
	Variant string
	// Requests counts the requests sent during the outage; Refused those of them the
	// breaker refused; DownCalls the calls that reached the downstream while it was
	// down; OutageOK the outage requests answered 200 (should be 0).
	Requests, Refused, DownCalls, OutageOK int
	// BeforeOpen and WhileOpen split the outage requests that got the dead
	// downstream's 503 by when they were sent: before the breaker first opened, and
	// after (probes, and calls of a circuit closed again).
	BeforeOpen, WhileOpen int
	// WarmupErrors counts the requests sent and answered before the outage that
	// failed, other than by a 503. One sent just before the outage may meet it: reach
	// the downstream in it, or, on a busy machine, pass the breaker only after an
	// outage's 503 has opened it.
	WarmupErrors int
	// TimeToOpen is from the outage's start to the breaker's first open state.
	TimeToOpen time.Duration
	// ToClosed is from the recovery to the breaker's closed state (0 when it was
	// closed at the recovery); RefusedAfter counts the requests it refused after the
	// recovery, the healthy downstream being up.
	ToClosed     time.Duration
	RefusedAfter int
	// Watched is how long the recovery was watched.
	Watched time.Duration
	Opens   int
}

// RunOutage runs the outage for every variant side by side, each with its own
// downstream on 127.0.0.1, its own client and its own load.
func RunOutage(vs []Variant, cfg OutageConfig) ([]OutageResult, error) {
	if !(cfg.Rate > 0) || cfg.Budget <= 0 || cfg.Warmup <= 0 || cfg.Outage <= 0 || cfg.Cap < 0 {
		return nil, fmt.Errorf("breakercmp: bad outage config %+v", cfg)
	}
	lanes := make([]*lane, len(vs))
	for i, v := range vs {
		lanes[i] = newLane(v, cfg.Delay)
	}
	stop := make(chan struct{})
	var drivers, watchers sync.WaitGroup
	start := time.Now()
	for _, l := range lanes {
		l.start = start
		l.watch(stop, &watchers)
		drive(l, cfg.Rate, stop, &drivers, func(int, time.Duration) (plan, time.Duration) { return planFair, cfg.Budget })
	}
	sleepUntil(start, cfg.Warmup)
	down := time.Since(start)
	for _, l := range lanes {
		l.be.down.Store(true)
	}
	sleepUntil(start, cfg.Warmup+cfg.Outage)
	for _, l := range lanes {
		l.be.down.Store(false)
	}
	up := time.Since(start)
	for cfg.Cap > 0 && time.Since(start)-up < cfg.Cap && !allClosed(lanes, up) {
		time.Sleep(10 * time.Millisecond)
	}
	end := time.Since(start)
	close(stop)
	drivers.Wait()
	watchers.Wait()
	out := make([]OutageResult, len(lanes))
	for i, l := range lanes {
		l.close()
		r := OutageResult{Variant: l.v.Name, DownCalls: int(l.be.downHits.Load()), TimeToOpen: -1, ToClosed: -1,
			Watched: end - up, Opens: l.inst.Opens()}
		for _, rec := range l.records {
			switch {
			case rec.sent < down:
				if rec.kind != kindOK && rec.kind != kindStatus && rec.sent+rec.took < down {
					r.WarmupErrors++
				}
			case rec.sent < up:
				r.Requests++
				if rec.kind == kindRefused {
					r.Refused++
				}
				if rec.kind == kindOK {
					r.OutageOK++
				}
			default:
				if rec.kind == kindRefused {
					r.RefusedAfter++
				}
			}
		}
		if at, ok := firstState(l.events, "open", down); ok && at < up {
			r.TimeToOpen = at - down
		}
		for _, rec := range l.records {
			if rec.sent >= down && rec.sent < up && rec.kind == kindStatus {
				if r.TimeToOpen < 0 || rec.sent < down+r.TimeToOpen {
					r.BeforeOpen++
				} else {
					r.WhileOpen++
				}
			}
		}
		if stateAt(l.events, up) == "closed" {
			r.ToClosed = 0
		} else if at, ok := firstState(l.events, "closed", up); ok {
			r.ToClosed = at - up
		}
		out[i] = r
	}
	return out, nil
}

func sleepUntil(start time.Time, at time.Duration) {
	if d := at - time.Since(start); d > 0 {
		time.Sleep(d)
	}
}

// allClosed reports whether every lane's breaker has been closed since up.
func allClosed(lanes []*lane, up time.Duration) bool {
	for _, l := range lanes {
		l.mu.Lock()
		s := stateAt(l.events, l.since())
		l.mu.Unlock()
		if s != "closed" {
			return false
		}
	}
	return true
}

// firstState returns the time of the first event at or after from that enters state.
func firstState(evs []event, state string, from time.Duration) (time.Duration, bool) {
	if stateAt(evs, from) == state {
		return from, true
	}
	for _, e := range evs {
		if e.at >= from && e.state == state {
			return e.at, true
		}
	}
	return 0, false
}

// stateAt returns the state in force at t.
func stateAt(evs []event, t time.Duration) string {
	s := "closed"
	for _, e := range evs {
		if e.at > t {
			break
		}
		s = e.state
	}
	return s
}

// Neutral names the callers' behaviour in a [NeutralConfig].
type Neutral uint8

const (
	// Cancel: a share of the callers cancel their context before the answer.
	Cancel Neutral = iota + 1
	// Starved: a share of the calls arrive with a budget below the target's median latency.
	Starved
)

func (n Neutral) String() string {
	if n == Cancel {
		return "early cancellations"
	}
	return "starved budgets"
}

// NeutralConfig scripts a healthy downstream (answers after Delay) under an
// open-loop load of Rate requests per second, each with budget Budget: Warmup of
// plain traffic, then Duration in which each call, with probability Share (a
// seeded draw, the same for every variant), is cancelled by its caller CancelAfter
// after it is sent (Cancel) or carries the budget StarvedBudget instead (Starved).
type NeutralConfig struct {
	Kind                       Neutral
	Rate, Share                float64
	Budget, Delay              time.Duration
	CancelAfter, StarvedBudget time.Duration
	Warmup, Duration           time.Duration
	Seed                       uint64
}

// NeutralResult is what [RunNeutral] measured of one variant.
type NeutralResult struct {
	Variant string
	Kind    Neutral
	// Calls counts every request; Planned those meant to be cancelled or starved;
	// AsPlanned those of them that ended as planned (context.Canceled, or
	// context.DeadlineExceeded without an answer).
	Calls, Planned, AsPlanned int
	// Scripted counts the requests sent after the warm-up, among which the planned ones are drawn.
	Scripted int
	// FairOK counts the other requests answered 200, FairFailed those that were
	// not (refusals included).
	FairOK, FairFailed int
	// Opens counts the breaker's openings (false: the downstream is healthy);
	// Refused the requests it refused; Failures the calls it counted as failures.
	Opens, Refused, Failures int
	// Median is the fair requests' median latency: the target's typical latency.
	Median time.Duration
	// LongestRun is the longest run of planned calls among the calls sent, taken in
	// the order they ended: what a breaker counting consecutive failures sees.
	LongestRun int
}

// RunNeutral runs the neutral scenario for every variant side by side.
func RunNeutral(vs []Variant, cfg NeutralConfig) ([]NeutralResult, error) {
	if !(cfg.Rate > 0) || !(cfg.Share >= 0 && cfg.Share <= 1) || cfg.Budget <= 0 || cfg.Duration <= 0 ||
		(cfg.Kind != Cancel && cfg.Kind != Starved) {
		return nil, fmt.Errorf("breakercmp: bad neutral config %+v", cfg)
	}
	lanes := make([]*lane, len(vs))
	for i, v := range vs {
		lanes[i] = newLane(v, cfg.Delay)
	}
	stop := make(chan struct{})
	var drivers sync.WaitGroup
	start := time.Now()
	for _, l := range lanes {
		l.start = start
		l.cancelAfter = cfg.CancelAfter
		rng := rand.New(rand.NewPCG(cfg.Seed, 0x6272656b))
		drive(l, cfg.Rate, stop, &drivers, func(_ int, at time.Duration) (plan, time.Duration) {
			if at < cfg.Warmup || rng.Float64() >= cfg.Share {
				return planFair, cfg.Budget
			}
			if cfg.Kind == Cancel {
				return planCancel, cfg.Budget
			}
			return planStarved, cfg.StarvedBudget
		})
	}
	sleepUntil(start, cfg.Warmup+cfg.Duration)
	close(stop)
	drivers.Wait()
	out := make([]NeutralResult, len(lanes))
	for i, l := range lanes {
		l.close()
		r := NeutralResult{Variant: l.v.Name, Kind: cfg.Kind, Opens: l.inst.Opens(), Failures: l.inst.Failures()}
		var fair []time.Duration
		for _, rec := range l.records {
			r.Calls++
			if rec.sent >= cfg.Warmup {
				r.Scripted++
			}
			if rec.kind == kindRefused {
				r.Refused++
			}
			switch rec.plan {
			case planFair:
				if rec.kind == kindOK {
					r.FairOK++
					fair = append(fair, rec.took)
				} else {
					r.FairFailed++
				}
			case planCancel:
				r.Planned++
				if rec.kind == kindCanceled {
					r.AsPlanned++
				}
			case planStarved:
				r.Planned++
				if rec.kind == kindDeadline {
					r.AsPlanned++
				}
			}
		}
		r.LongestRun = longestRun(l.records)
		if len(fair) > 0 {
			slices.Sort(fair)
			r.Median = fair[len(fair)/2]
		}
		out[i] = r
	}
	return out, nil
}

// longestRun returns the longest run of planned (cancelled or starved) calls that
// reached the breaker, in the order they ended; refused calls are left out.
func longestRun(recs []record) int {
	sorted := slices.Clone(recs)
	slices.SortFunc(sorted, func(a, b record) int { return int((a.sent + a.took) - (b.sent + b.took)) })
	run, best := 0, 0
	for _, r := range sorted {
		switch {
		case r.kind == kindRefused:
		case r.plan != planFair:
			run++
			best = max(best, run)
		default:
			run = 0
		}
	}
	return best
}
