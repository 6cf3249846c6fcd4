package admissioncmp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deadlinekit/deadlinekit/propagate"
)

// Config is one cell: one mode and one load, each variant measured one after
// another (Rounds times, interleaved), each against a fresh server and client.
type Config struct {
	Mode Mode
	// Load is the offered rate as a multiple of the capacity (Workers / Work).
	Load float64
	// MinBudget and MaxBudget bound each request's deadline (uniform draw).
	MinBudget, MaxBudget time.Duration
	// Warmup is sent at the same load before the measured Duration, not counted:
	// the adaptive limits learn in it.
	Warmup, Duration time.Duration
	// Rounds repeats every variant's run, interleaved; the counts add up.
	Rounds int
	// Seed seeds the arrivals and the deadlines: every variant of a cell gets the
	// same ones (each round its own).
	Seed uint64
	// MaxInFlight caps the client's requests in flight; an arrival beyond it is
	// dropped, not sent, and counted.
	MaxInFlight int
	// Fixed sends the arrivals at a fixed rate instead of Poisson's.
	Fixed bool
	// ShortShare of the requests get a budget from [ShortMin, ShortMax] instead.
	ShortShare         float64
	ShortMin, ShortMax time.Duration
	// Shape changes the server's work in the measured part (zero: none).
	Shape Shape
}

// Capacity is the server's capacity in requests per second.
func Capacity() float64 { return Workers / Work.Seconds() }

func (c Config) validate() error {
	if c.Mode != Stops && c.Mode != Ignores || !(c.Load > 0 && c.Load <= 10) || c.MinBudget <= 0 ||
		c.MaxBudget < c.MinBudget || c.MaxBudget > 10*time.Second || c.Warmup < 0 || c.Warmup > time.Minute ||
		c.Duration <= 0 || c.Duration > time.Minute || c.Rounds < 1 || c.Rounds > 20 || c.MaxInFlight < 1 || c.MaxInFlight > 100000 ||
		!(c.ShortShare >= 0 && c.ShortShare <= 1) || c.ShortShare > 0 && (c.ShortMin <= 0 || c.ShortMax < c.ShortMin || c.ShortMax > c.MaxBudget) ||
		c.Shape.Slow.Factor < 0 || c.Shape.Slow.Factor > 10 || c.Shape.Slow.From < 0 || c.Shape.Slow.For < 0 ||
		c.Shape.Knee < 0 || c.Shape.Knee > 1000 || c.Shape.KneeAfter < 0 || c.Shape.KneeAfter > 1000 || c.Shape.KneeAt < 0 {
		return fmt.Errorf("admissioncmp: bad config %+v", c)
	}
	return nil
}

// Result is what one variant measured in one cell, over the measured requests
// (those sent after the warm-up), all rounds together.
type Result struct {
	Variant string
	Mode    Mode
	Load    float64
	// Measured is the measured time (Duration × Rounds).
	Measured time.Duration
	// Arrivals counts the measured arrivals; Dropped those not sent (the client's
	// in-flight cap); Sent = Arrivals − Dropped.
	Arrivals, Dropped, Sent int
	// OK counts the 200 answers received before the deadline; Refused the other
	// answers received before it (a guard's refusal); NoAnswer the requests that
	// got nothing in time: the client's deadline passed first, or the handler's
	// own deadline 504 came; Errors anything else (should be 0).
	OK, Refused, NoAnswer, Errors int
	// Statuses counts the refusals by status code.
	Statuses map[int]int
	// AnswerP50 and AnswerP99 are the latencies of the 200s; RefusalP99 of the refusals.
	AnswerP50, AnswerP99, RefusalP99 time.Duration
	// Busy is the time the server's slots were held for measured requests; Wasted
	// the part of it for requests whose context had ended when their work ended.
	Busy, Wasted time.Duration
	// Worked counts the measured requests that held a slot; Cut those still
	// waiting for one at the cell's end, released without working.
	Worked, Cut int
	// Peak is the most requests in the handler at once (waiting for a slot or
	// holding one) after the warm-up: the concurrency the guard let through (the
	// largest of the rounds).
	Peak int
	// Lag is the longest the generator sent an arrival after its time (it fell
	// behind by this much at worst).
	Lag time.Duration
	// FirstError is the first unexpected error, for the harness.
	FirstError string
	// Rounds holds each round's figures, Med their medians.
	Rounds []Fig
	Med    Fig

	answers, refusals []time.Duration
}

// Goodput is the 200s answered in time per second.
func (r Result) Goodput() float64 {
	if r.Measured <= 0 {
		return 0
	}
	return float64(r.OK) / r.Measured.Seconds()
}

// WastedShare is wasted work / all work.
func (r Result) WastedShare() float64 {
	if r.Busy <= 0 {
		return 0
	}
	return float64(r.Wasted) / float64(r.Busy)
}

// Run measures every variant in one cell.
func Run(vs []Variant, cfg Config) ([]Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	out := make([]Result, len(vs))
	for i, v := range vs {
		out[i] = Result{Variant: v.Name, Mode: cfg.Mode, Load: cfg.Load, Statuses: map[int]int{}}
	}
	for round := range cfg.Rounds {
		// Alternate the order too: no variant always runs first, or last.
		for j := range vs {
			i := j
			if round%2 == 1 {
				i = len(vs) - 1 - j
			}
			if err := runOne(vs[i], cfg, round, &out[i]); err != nil {
				return nil, fmt.Errorf("admissioncmp: %s: %w", vs[i].Name, err)
			}
		}
	}
	for i := range out {
		r := &out[i]
		slices.Sort(r.answers)
		slices.Sort(r.refusals)
		r.AnswerP50, r.AnswerP99 = pct(r.answers, 0.5), pct(r.answers, 0.99)
		r.RefusalP99 = pct(r.refusals, 0.99)
		r.Med = median(r.Rounds)
	}
	return out, nil
}

type fate uint8

const (
	fateOK fate = iota
	fateRefused
	fateNoAnswer
	fateError
)

type record struct {
	fate   fate
	status int
	took   time.Duration
	err    error
	short  bool          // a short budget (Config.ShortShare)
	at     time.Duration // sent at, from the measured part's start
	// measured: sent in the measured part. The others (the warm-up's) count
	// only towards the goodput, answered in time inside the measured part.
	measured bool
}

// runOne runs v once in cfg's cell and adds what it measured to r.
func runOne(v Variant, cfg Config, round int, r *Result) error {
	var guard func(http.Handler) http.Handler
	if v.Guard != nil {
		guard = v.Guard()
	}
	srv, err := newServer(cfg.Mode, Workers, Work, cfg.Shape, guard)
	if err != nil {
		return err
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	base := &http.Transport{Protocols: &p, Proxy: nil, MaxIdleConns: 16, IdleConnTimeout: 30 * time.Second}
	// The client sends any budget (its transport refuses none below a floor): the
	// server decides what to do with a short one.
	client := &http.Client{Transport: propagate.NewTransport(base, propagate.WithFloor(0))}
	url := srv.url()

	// The same arrivals and deadlines for every variant of the cell and round.
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Mode)<<56^uint64(cfg.Load*1000)<<16^uint64(round)))
	rate := cfg.Load * Capacity()
	span := int64(cfg.MaxBudget - cfg.MinBudget)

	var (
		mu       sync.Mutex
		recs     []record
		wg       sync.WaitGroup
		inflight atomic.Int64
	)
	end := cfg.Warmup + cfg.Duration
	sched := schedSnapshot()
	start := time.Now()
	srv.from.Store(start.Add(cfg.Warmup).UnixNano())
	if srv.ps != nil {
		srv.ps.until.Store(start.Add(end).UnixNano())
	}
	at := time.Duration(0)
	for {
		if cfg.Fixed {
			at += time.Duration(float64(time.Second) / rate)
		} else {
			at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		}
		if at >= end {
			break
		}
		budget := cfg.MinBudget + time.Duration(rng.Int64N(span+1))
		short := cfg.ShortShare > 0 && rng.Float64() < cfg.ShortShare
		if short {
			budget = cfg.ShortMin + time.Duration(rng.Int64N(int64(cfg.ShortMax-cfg.ShortMin)+1))
		}
		if d := at - time.Since(start); d > 100*time.Microsecond {
			time.Sleep(d)
		} else if -d > r.Lag {
			r.Lag = -d
		}
		measured := at >= cfg.Warmup
		if measured {
			r.Arrivals++
		}
		if inflight.Load() >= int64(cfg.MaxInFlight) {
			if measured {
				r.Dropped++
			}
			continue
		}
		inflight.Add(1)
		sentAt := at - cfg.Warmup
		wg.Go(func() {
			defer inflight.Add(-1)
			rec := send(client, url, budget, measured)
			rec.short, rec.at, rec.measured = short, sentAt, measured
			if measured || rec.fate == fateOK && sentAt+rec.took >= 0 {
				mu.Lock()
				recs = append(recs, rec)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	base.CloseIdleConnections()
	srv.close()

	r.Measured += cfg.Duration
	for _, rec := range recs {
		if !rec.measured {
			continue
		}
		r.Sent++
		switch rec.fate {
		case fateOK:
			r.OK++
			r.answers = append(r.answers, rec.took)
		case fateRefused:
			r.Refused++
			r.Statuses[rec.status]++
			r.refusals = append(r.refusals, rec.took)
		case fateNoAnswer:
			r.NoAnswer++
		default:
			r.Errors++
			if r.FirstError == "" {
				r.FirstError = rec.err.Error()
			}
		}
	}
	f := figure(cfg, recs, time.Duration(srv.busy.Load()), time.Duration(srv.wasted.Load()), srv.conc)
	after := schedSnapshot()
	f.Sched99, f.Sched999 = schedQuantile(sched, after, 0.99), schedQuantile(sched, after, 0.999)
	if srv.ps != nil {
		f.Late50, f.Late90 = srv.ps.lateness()
		f.Idle = srv.ps.idle()
	}
	r.Rounds = append(r.Rounds, f)
	r.Busy += time.Duration(srv.busy.Load())
	r.Wasted += time.Duration(srv.wasted.Load())
	r.Worked += int(srv.worked.Load())
	r.Cut += int(srv.cut.Load())
	r.Peak = max(r.Peak, int(srv.peak.Load()))
	return nil
}

// send makes one request with the given budget and says what became of it.
func send(c *http.Client, url string, budget time.Duration, measured bool) record {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	resp, took, err := get(ctx, c, url, measured)
	rec := record{took: took, err: err}
	switch {
	case err != nil && errors.Is(err, context.DeadlineExceeded):
		rec.fate = fateNoAnswer
	case err != nil:
		rec.fate = fateError
	case resp.Header.Get(headerGaveUp) != "" || rec.took > budget:
		rec.fate = fateNoAnswer
	case resp.StatusCode == http.StatusOK:
		rec.fate = fateOK
	default:
		rec.fate, rec.status = fateRefused, resp.StatusCode
	}
	return rec
}

// get sends a GET to url on c under ctx, marked measured or not, and reads its
// answer whole: the response (its body closed) or the error, and how long it took.
func get(ctx context.Context, c *http.Client, url string, measured bool) (*http.Response, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, 0, err
	}
	if measured {
		req.Header.Set(headerMeasured, "1")
	}
	t0 := time.Now()
	resp, err := c.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, time.Since(t0), err
}

// pct is the nearest-rank percentile of sorted durations.
func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
