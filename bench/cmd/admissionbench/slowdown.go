package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/deadlinekit/deadlinekit/bench/admissioncmp"
)

// cell is one cell of the slowdown suite (issue 25).
type cell struct {
	name  string
	mode  admissioncmp.Mode
	load  float64
	shape admissioncmp.Shape
	short bool // 30% of the budgets in [12 ms, 25 ms]
	knee  int  // the saturation backend's knee after the change (0: slots)
	extra []int
}

// slowdown runs the issue-25 cells: a controlled slowdown (a 3× step from 30% of the
// measured time, and a 1 s 2× transient from there), the saturation backend (knee 8,
// then 4 two seconds before the end; shared and fixed at start; and shared at 8 and
// at 4 throughout), and the mixed-budget workload; arrivals
// open-loop at a fixed rate; every variant of a cell once per round, the rounds
// alternating the order; the figures are the medians of the rounds.
func slowdown(rounds int, warmup, duration time.Duration, seed uint64, maxInFlight int, only, cellFilter string, queues bool, out *jsonOut) {
	at := duration * 3 / 10
	step := admissioncmp.Shape{Slow: admissioncmp.Slowdown{Factor: 3, From: at}}
	transient := admissioncmp.Shape{Slow: admissioncmp.Slowdown{Factor: 2, From: at, For: time.Second}}
	kneeAt := duration - 2*time.Second
	if kneeAt < 0 {
		kneeAt = duration / 5
	}
	saturation := admissioncmp.Shape{Knee: admissioncmp.Workers, KneeAfter: admissioncmp.Workers / 2, KneeAt: kneeAt}
	shared := saturation
	shared.Shared = true
	cells := []cell{
		{name: "3× step", mode: admissioncmp.Stops, load: 2, shape: step},
		{name: "3× step", mode: admissioncmp.Ignores, load: 2, shape: step},
		{name: "3× step", mode: admissioncmp.Stops, load: 4, shape: step},
		{name: "1 s 2× transient", mode: admissioncmp.Stops, load: 2, shape: transient},
		{name: "1 s 2× transient", mode: admissioncmp.Ignores, load: 2, shape: transient},
		{name: "shared saturation, knee 8 → 4", mode: admissioncmp.Stops, load: 2, shape: shared, knee: admissioncmp.Workers / 2, extra: []int{4, 16}},
		{name: "shared saturation, knee 8 throughout", mode: admissioncmp.Stops, load: 2, shape: admissioncmp.Shape{Knee: admissioncmp.Workers, Shared: true}, extra: []int{9, 10, 12, 16}},
		{name: "shared saturation, knee 4 throughout", mode: admissioncmp.Stops, load: 2, shape: admissioncmp.Shape{Knee: admissioncmp.Workers / 2, Shared: true}, extra: []int{4, 5, 6, 16}},
		{name: "saturation fixed at start, knee 8 → 4", mode: admissioncmp.Stops, load: 2, shape: saturation, knee: admissioncmp.Workers / 2, extra: []int{4, 16}},
		{name: "mixed budgets", mode: admissioncmp.Stops, load: 2, short: true},
		{name: "mixed budgets", mode: admissioncmp.Ignores, load: 4, short: true},
	}
	if cellFilter != "" {
		var keep []cell
		for _, c := range cells {
			if matches(fmt.Sprintf("%s, %s, %g×", c.name, shortMode(c.mode), c.load), cellFilter) {
				keep = append(keep, c)
			}
		}
		cells = keep
	}
	var base []admissioncmp.Variant
	for _, v := range admissioncmp.Variants() {
		if v.Guard != nil && v.Name != "deadlinekit shortcircuit, static floor" && matches(v.Name, only) {
			base = append(base, v)
		}
	}
	runs := 0
	for _, c := range cells {
		runs += len(base) + len(c.extra)
		if queues {
			runs += len(admissioncmp.QueueVariants())
		}
	}
	per := warmup + duration + 300*time.Millisecond
	fmt.Fprintf(os.Stderr, "admissionbench: %d cells, %d runs × %d rounds; about %v\n", len(cells), runs, rounds, (per * time.Duration(runs*rounds)).Round(time.Second))

	fmt.Printf("Command: `%s`\n\n", command())
	fmt.Printf("%s, %s, GOMAXPROCS %d, load average at the start %s; server on 127.0.0.1 (h2c): %d slots × %v (%.0f requests/s); open-loop arrivals at a fixed rate; budgets uniform in [50 ms, 300 ms] (mixed: 30%% in [12 ms, 25 ms]); per variant and round %v of warm-up then %v measured; %d rounds, each running every variant once (the order reversed every other round); figures are the medians of the rounds; seed %d\n\n",
		time.Now().UTC().Format(time.RFC3339), runtime.Version(), runtime.GOMAXPROCS(0), loadavg(), admissioncmp.Workers, admissioncmp.Work,
		admissioncmp.Capacity(), warmup, duration, rounds, seed)

	type done struct {
		c  cell
		rs []admissioncmp.Result
	}
	var all []done
	for _, c := range cells {
		vs := base
		if len(c.extra) > 0 {
			vs = append(admissioncmp.StaticVariants(c.extra...), base...)
		}
		if queues {
			vs = append(slices.Clone(vs), admissioncmp.QueueVariants()...)
		}
		cfg := admissioncmp.Config{Mode: c.mode, Load: c.load, MinBudget: 50 * time.Millisecond, MaxBudget: 300 * time.Millisecond,
			Warmup: warmup, Duration: duration, Rounds: rounds, Seed: seed, MaxInFlight: maxInFlight, Fixed: true, Shape: c.shape}
		if c.short {
			cfg.ShortShare, cfg.ShortMin, cfg.ShortMax = 0.3, 12*time.Millisecond, 25*time.Millisecond
		}
		fmt.Fprintf(os.Stderr, "%s, %s, %g× ...\n", c.name, shortMode(c.mode), c.load)
		rs, err := admissioncmp.Run(vs, cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "admissionbench:", err)
			os.Exit(1)
		}
		all = append(all, done{c, rs})
		out.add(fmt.Sprintf("%s, %s, %g×", c.name, shortMode(c.mode), c.load), cfg, rs)
	}

	// The summary: goodput of every variant in every cell.
	fmt.Println("Goodput, medians, % of the 800 requests/s capacity (slowdown cells: whole window / slow phase as % of the slowed capacity):")
	fmt.Println()
	head, rule := "| variant |", "| --- |"
	for _, d := range all {
		head += fmt.Sprintf(" %s, %s, %g× |", d.c.name, shortMode(d.c.mode), d.c.load)
		rule += " ---: |"
	}
	fmt.Println(head)
	fmt.Println(rule)
	names := []string{}
	seen := map[string]bool{}
	for _, d := range all {
		for _, r := range d.rs {
			if !seen[r.Variant] {
				seen[r.Variant] = true
				names = append(names, r.Variant)
			}
		}
	}
	for _, n := range names {
		line := "| " + n + " |"
		for _, d := range all {
			cellText := " – |"
			for _, r := range d.rs {
				if r.Variant != n {
					continue
				}
				cellText = fmt.Sprintf(" **%.1f%%**", 100*r.Med.Goodput/admissioncmp.Capacity())
				if f := d.c.shape.Slow.Factor; f > 0 {
					cellText += fmt.Sprintf(" / %.0f%%", 100*r.Med.SlowGoodput/(admissioncmp.Capacity()/f))
				}
				cellText += " |"
			}
			line += cellText
		}
		fmt.Println(line)
	}
	fmt.Println()

	for _, d := range all {
		c := d.c
		fmt.Printf("#### %s, %s, %g× (%.0f requests/s offered)\n\n", c.name, c.mode, c.load, c.load*admissioncmp.Capacity())
		h := "| variant | goodput, % of capacity (rounds) | wasted work | no answer in time | refused | refusals p50 / p99 | answers p99 |"
		r := "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
		if c.shape.Slow.Factor > 0 {
			h += " slow phase goodput, % of the slowed capacity |"
			r += " ---: |"
		}
		if c.short {
			h += " short budgets: answered / refusals p50 / p99 / refused after 1 ms |"
			r += " ---: |"
		}
		if c.shape.Knee > 0 {
			h += " in the handler, last second |"
			r += " ---: |"
		}
		if c.knee > 0 {
			h += " settled near the new knee after |"
			r += " ---: |"
		}
		if c.shape.Shared {
			h += " work's end noticed late, p50 / p90 | backend's capacity unused | scheduling latency p99 / p99.9 |"
			r += " ---: | ---: | ---: |"
		}
		fmt.Println(h)
		fmt.Println(r)
		for _, res := range d.rs {
			m := res.Med
			var per []string
			for _, f := range res.Rounds {
				per = append(per, fmt.Sprintf("%.0f", 100*f.Goodput/admissioncmp.Capacity()))
			}
			line := fmt.Sprintf("| %s | **%.0f%%** (%s) | %s | %s | %s | %s / %s | %s |", res.Variant, 100*m.Goodput/admissioncmp.Capacity(), strings.Join(per, ", "),
				pctStr(m.Wasted), pct1(m.NoAnswer), pct1(m.Refused), ms(m.RefusalP50), ms(m.RefusalP99), ms(m.AnswerP99))
			if f := c.shape.Slow.Factor; f > 0 {
				line += fmt.Sprintf(" %.0f%% |", 100*m.SlowGoodput/(admissioncmp.Capacity()/f))
			}
			if c.short {
				line += fmt.Sprintf(" %s / %s / %s / %s |", pct1(m.ShortOK), ms(m.ShortRefusalP50), ms(m.ShortRefusalP99), pct1(m.ShortSlowRefusals))
			}
			if c.shape.Knee > 0 {
				line += fmt.Sprintf(" %.1f |", m.Conc)
			}
			if c.knee > 0 {
				line += fmt.Sprintf(" %s |", m.Settle.Round(10*time.Millisecond))
			}
			if c.shape.Shared {
				line += fmt.Sprintf(" %s / %s | %.1f%% | %s / %s |", ms(m.Late50), ms(m.Late90), 100*m.Idle, ms(m.Sched99), ms(m.Sched999))
			}
			fmt.Println(line)
			if res.Errors > 0 {
				fmt.Fprintf(os.Stderr, "%s: %d errors, the first: %s\n", res.Variant, res.Errors, res.FirstError)
			}
		}
		fmt.Println()
	}
	fmt.Printf("Load average at the end: %s.\n\n", loadavg())
	fmt.Println("Goodput: 200 answers received before their deadline inside the measured time, per second, as a share of the unslowed capacity (800/s), whenever their requests were sent (counting the answers to the requests sent in it instead would credit a variant that ends it with a deeper backlog with the work done after its end); the slow phase's counts the answers inside the slowdown, as a share of the slowed capacity (800/s ÷ the factor). Wasted work: slot time spent on requests whose context had ended when their work ended. No answer in time: the client's deadline passed first (a request admitted or queued by the guard that timed out), or the handler's own 504 when its context ended. Refused: an answer other than 200 before the deadline. Latencies are the client's. Short budgets (mixed cells): the requests with 12–25 ms, answered in time; their refusals' latency; the share of their refusals that took over 1 ms. Saturation: the mean of the requests in the handler over the last second, and when, after the knee fell to 4, the 100 ms means of the requests in the handler came within [3, 6] and stayed (the cell's rest when never). Shared saturation: the knee's capacity is shared among the requests working (each at knee/n of full speed beyond the knee, from start to end); fixed at start: a request's work is fixed when it starts (n/knee × 10 ms). Work's end noticed late: how late the shared backend's timer fired after a job's end; until then its handler cannot return and no request can take its place. Backend's capacity unused: the share of the knee's capacity no request used over the measured time (fewer than knee working), however many were in the handler. Scheduling latency: the process's, over the round (runtime/metrics /sched/latencies: how long a goroutine ready to run waited to), bucket upper bounds.")
	fmt.Println()
}

func pct1(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// matches reports whether name contains one of the |-separated parts of only (all
// names match an empty only); a part ending in $ must end the name.
func matches(name, only string) bool {
	if only == "" {
		return true
	}
	for _, part := range strings.Split(only, "|") {
		if p, ok := strings.CutSuffix(part, "$"); ok && p != "" && strings.HasSuffix(name, p) {
			return true
		}
		if part != "" && strings.Contains(name, part) {
			return true
		}
	}
	return false
}
