package admissioncmp

import (
	"slices"
	"time"
)

// Shape is how the server's work changes in the measured part of a cell; its
// times count from the measured part's start. The zero Shape is the plain server:
// Workers slots, Work each.
type Shape struct {
	// Slow multiplies every request's work by Factor from From on, for For (zero:
	// to the end), however many run: a slowdown that concurrency does not cause
	// (a slower dependency). Zero Factor: none.
	Slow Slowdown
	// Knee, when set, makes the saturation backend instead of the slots: every
	// request starts its work at once, and with n working beyond Knee (n counted
	// as it starts, itself included) its work takes n/Knee times longer, so the
	// throughput stays Knee/Work and more at once only adds latency. From KneeAt
	// on the knee is KneeAfter (zero: unchanged).
	Knee, KneeAfter int
	KneeAt          time.Duration
	// Shared makes the saturation backend share the knee's capacity among the
	// requests working (processor sharing): with n working beyond the knee,
	// every one of them advances at knee/n of full speed, from when it starts
	// to when it ends, so that each slows when another starts and speeds up
	// when one ends. Without it a request's work is fixed as it starts.
	Shared bool
}

// Slowdown is a change of every request's work by a factor for a while.
type Slowdown struct {
	Factor float64
	From   time.Duration
	For    time.Duration // zero: to the end of the cell
}

// Fig is one round's figures for a variant (Result.Rounds), or their medians
// (Result.Med, each figure the median of the rounds' independently).
type Fig struct {
	// Goodput is the 200s in time answered inside the measured part, per
	// second (whenever they were sent); SlowGoodput the same inside the slowdown
	// (zero without one).
	Goodput, SlowGoodput float64
	// Wasted is wasted work / all work; NoAnswer the share of requests sent that
	// got no answer in time (admitted, or queued by a guard, and timed out);
	// Refused the share refused.
	Wasted, NoAnswer, Refused float64
	// AnswerP99 is the 200s' latency; RefusalP50 and RefusalP99 the refusals'.
	AnswerP99, RefusalP50, RefusalP99 time.Duration
	// For the short-budget requests (Config.ShortShare): the share answered in
	// time, the refusals' p50 and p99, and the share of them refused later than
	// 1 ms after sending.
	ShortOK                          float64
	ShortRefusalP50, ShortRefusalP99 time.Duration
	ShortSlowRefusals                float64
	// Conc is the mean of the requests in the handler over the last second;
	// Settle is, after the knee's change, when the 100 ms means of the requests in
	// the handler came within [0.75, 1.5] × the new knee and stayed there (the
	// cell's rest when they never did).
	Conc   float64
	Settle time.Duration
	// Late50 and Late90 are, for the shared saturation backend (Shape.Shared),
	// how late its timer noticed a job's end, p50 and p90: the job ends on
	// time, but its handler returns, and a request can take its place, only
	// then. (Go's timers on a loaded machine; the slots' sleeps have the same.)
	Late50, Late90 time.Duration
	// Idle is, for the shared saturation backend, the share of its knee's
	// capacity left unused over the measured part: moments with fewer than
	// knee requests working, however many were in the handler.
	Idle float64
	// Sched99 and Sched999 are the p99 and p99.9 of the process's scheduling
	// latency over the round (runtime/metrics /sched/latencies:seconds): how
	// long a goroutine ready to run waited to, a freed slot's next request
	// among them.
	Sched99, Sched999 time.Duration
	// InHandler is the requests in the handler (waiting for a slot or holding
	// one: what the guard let through), sampled every 10 ms over the measured
	// part; one round's only (Result.Med has none).
	InHandler []int64 `json:",omitempty"`
}

// median is the median of each figure of fs.
func median(fs []Fig) Fig {
	if len(fs) == 0 {
		return Fig{}
	}
	f := func(get func(Fig) float64) float64 {
		xs := make([]float64, len(fs))
		for i, x := range fs {
			xs[i] = get(x)
		}
		slices.Sort(xs)
		if n := len(xs); n%2 == 0 {
			return (xs[n/2-1] + xs[n/2]) / 2
		}
		return xs[len(xs)/2]
	}
	d := func(get func(Fig) time.Duration) time.Duration {
		return time.Duration(f(func(x Fig) float64 { return float64(get(x)) }))
	}
	return Fig{
		Goodput:           f(func(x Fig) float64 { return x.Goodput }),
		SlowGoodput:       f(func(x Fig) float64 { return x.SlowGoodput }),
		Wasted:            f(func(x Fig) float64 { return x.Wasted }),
		NoAnswer:          f(func(x Fig) float64 { return x.NoAnswer }),
		Refused:           f(func(x Fig) float64 { return x.Refused }),
		AnswerP99:         d(func(x Fig) time.Duration { return x.AnswerP99 }),
		RefusalP50:        d(func(x Fig) time.Duration { return x.RefusalP50 }),
		RefusalP99:        d(func(x Fig) time.Duration { return x.RefusalP99 }),
		ShortOK:           f(func(x Fig) float64 { return x.ShortOK }),
		ShortRefusalP50:   d(func(x Fig) time.Duration { return x.ShortRefusalP50 }),
		ShortRefusalP99:   d(func(x Fig) time.Duration { return x.ShortRefusalP99 }),
		ShortSlowRefusals: f(func(x Fig) float64 { return x.ShortSlowRefusals }),
		Conc:              f(func(x Fig) float64 { return x.Conc }),
		Settle:            d(func(x Fig) time.Duration { return x.Settle }),
		Late50:            d(func(x Fig) time.Duration { return x.Late50 }),
		Late90:            d(func(x Fig) time.Duration { return x.Late90 }),
		Idle:              f(func(x Fig) float64 { return x.Idle }),
		Sched99:           d(func(x Fig) time.Duration { return x.Sched99 }),
		Sched999:          d(func(x Fig) time.Duration { return x.Sched999 }),
	}
}

// figure computes one round's figures from its records and the server's samples.
func figure(cfg Config, recs []record, busy, wasted time.Duration, conc []int64) Fig {
	var f Fig
	var answers, refusals, shortRefusals []time.Duration
	ok, slowOK, short, shortOK, shortLate := 0, 0, 0, 0, 0
	sl := cfg.Shape.Slow
	slowEnd := sl.From + sl.For
	if sl.For == 0 {
		slowEnd = cfg.Duration
	}
	sent := 0
	for _, r := range recs {
		if r.fate == fateOK {
			// The goodput is the answers in time inside the measured part
			// (or its slow phase), whenever they were sent: counting instead
			// the answers to the requests sent in it would credit a guard
			// that ends the part with a deeper backlog with the work done
			// after the part's end, and charge one that begins it with a
			// deeper one for the warm-up's.
			if end := r.at + r.took; end >= 0 && end < cfg.Duration {
				ok++
				if sl.Factor > 0 && end >= sl.From && end < slowEnd {
					slowOK++
				}
			}
		}
		if !r.measured {
			continue
		}
		sent++
		if r.short {
			short++
		}
		switch r.fate {
		case fateOK:
			answers = append(answers, r.took)
			if r.short {
				shortOK++
			}
		case fateRefused:
			refusals = append(refusals, r.took)
			if r.short {
				shortRefusals = append(shortRefusals, r.took)
				if r.took > time.Millisecond {
					shortLate++
				}
			}
			f.Refused++
		case fateNoAnswer:
			f.NoAnswer++
		}
	}
	if n := float64(sent); n > 0 {
		f.Refused /= n
		f.NoAnswer /= n
	}
	f.Goodput = float64(ok) / cfg.Duration.Seconds()
	if sl.Factor > 0 && slowEnd > sl.From {
		f.SlowGoodput = float64(slowOK) / (slowEnd - sl.From).Seconds()
	}
	if busy > 0 {
		f.Wasted = float64(wasted) / float64(busy)
	}
	for _, xs := range [][]time.Duration{answers, refusals, shortRefusals} {
		slices.Sort(xs)
	}
	f.AnswerP99 = pct(answers, 0.99)
	f.RefusalP50, f.RefusalP99 = pct(refusals, 0.5), pct(refusals, 0.99)
	f.ShortRefusalP50, f.ShortRefusalP99 = pct(shortRefusals, 0.5), pct(shortRefusals, 0.99)
	if short > 0 {
		f.ShortOK = float64(shortOK) / float64(short)
	}
	if len(shortRefusals) > 0 {
		f.ShortSlowRefusals = float64(shortLate) / float64(len(shortRefusals))
	}
	// The samples are 10 ms apart from the measured part's start; only those of
	// the measured time count.
	if n := int(cfg.Duration / (10 * time.Millisecond)); len(conc) > n {
		conc = conc[:n]
	}
	f.InHandler = slices.Clone(conc)
	if n := len(conc); n > 0 {
		last := conc[max(n-100, 0):]
		sum := int64(0)
		for _, c := range last {
			sum += c
		}
		f.Conc = float64(sum) / float64(len(last))
	}
	if k := cfg.Shape.KneeAfter; k > 0 && cfg.Shape.Knee > 0 {
		first := int(cfg.Shape.KneeAt / (10 * time.Millisecond))
		settle := cfg.Duration - cfg.Shape.KneeAt
		for i := len(conc) - 10; i >= first; i -= 10 {
			sum := int64(0)
			for _, c := range conc[i : i+10] {
				sum += c
			}
			if m := float64(sum) / 10; m < 0.75*float64(k) || m > 1.5*float64(k) {
				break
			}
			settle = time.Duration(i-first) * 10 * time.Millisecond
		}
		f.Settle = settle
	}
	return f
}
