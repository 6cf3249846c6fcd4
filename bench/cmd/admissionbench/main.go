// Command admissionbench compares server-side admission control under overload
// (issue 16): no guard, deadlinekit's shortcircuit (static floor; static and
// adaptive concurrency limit), failsafe-go's adaptivelimiter and bulkhead and
// platinummonkey/go-concurrency-limits, against a loopback server of known capacity
// (8 worker slots × 10 ms = 800 requests/s), under an open-loop Poisson load at
// multiples of that capacity, each request with a deadline drawn from
// [50 ms, 300 ms]:
//
//	cd bench && go run ./cmd/admissionbench
//
// It runs every variant at every load twice, with handler work that stops when its
// context ends and with work that ignores it, one variant after another (a fresh
// server and client each), then deadlinekit's static limit with each queue order
// (FIFO, LIFO, earliest deadline first) at 2× and 4×. It prints markdown tables:
// goodput (200s before their deadline, per second and as a share of capacity),
// wasted work (slot time spent on requests whose caller had given up, as a share of
// all slot time), latencies of answers and refusals, refusals and requests left
// without an answer in time.
//
// It talks to 127.0.0.1 only, and every run is bounded: in load (-loads, at most
// 10× capacity), in time (-warmup and -duration per cell, -rounds), in requests in
// flight (-max-inflight). With the defaults the run takes about 7 minutes.
//
// With -cells slowdown it runs instead the cells of issue 25 (about 25 minutes):
//
//	cd bench && go run ./cmd/admissionbench -cells slowdown
//
// a 3× step slowdown from 30% of the measured time (2× and 4× load, both handler
// modes), a 1 s 2× transient, the saturation backend whose knee falls from 8 to 4
// (its capacity shared among the requests working, or each request's work fixed
// as it starts; static limits 4, 8 and 16 beside the adaptive ones), the shared
// one at a knee of 8 and of 4 throughout (static limits around each), and the mixed-budget
// workload (30% of the budgets in [12 ms, 25 ms]); arrivals at a fixed rate; three
// rounds, every variant once per round, the medians printed. -cell picks cells by
// name.
//
// With -cells criticality it runs instead issue 37's three-hop chain (about 10
// minutes):
//
//	cd bench && go run ./cmd/admissionbench -cells criticality
//
// a client → gateway (the edge, which sets each request's level from its path) →
// service → backend of 4 slots × 100 ms (40 requests/s), loopback h2c servers on
// their own listeners; critical traffic at 40% of the backend's capacity, the rest
// sheddable, offered 4× and 10× the capacity, and 10× again with refusals that cost
// the backend 10% of a request's work; the chain unloaded for each variant's
// unloaded p99. The toolkit's stack with levels (adaptive or static limit at the
// backend, with and without the clients' adaptive throttle), without levels, and
// failsafe-go's prioritized adaptive limiter. It prints a table per cell, then one
// line per cell and variant for scripts:
//
//	RESULT cell=<name> variant=<name> critical_goodput=<0..1> total_goodput=<0..1> critical_p99_ms=<ms> refusal_work=<0..1>
//
// -slots, -work, -min-budget, -max-budget, -warmup, -duration, -rounds, -only and
// -cell change it.
//
// With -json FILE it also writes every cell's results (each round's figures, with
// the requests in the handler every 10 ms) as JSON, for cmd/plots.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deadlinekit/deadlinekit/bench/admissioncmp"
)

func main() {
	loadsFlag := flag.String("loads", "0.5,1,1.5,2,4", "offered loads, as multiples of the capacity (each in (0, 10])")
	queueLoads := flag.String("queue-loads", "2,4", "loads of the queue-order comparison (empty: skip it)")
	modesFlag := flag.String("modes", "stops,ignores", "handler modes: stops (work ends with its context), ignores (it does not)")
	warmup := flag.Duration("warmup", time.Second, "load sent before each measured run, not counted (the adaptive limits learn in it)")
	duration := flag.Duration("duration", 3*time.Second, "measured time of each variant in each cell")
	rounds := flag.Int("rounds", 1, "runs of each variant per cell, interleaved (counts add up)")
	minBudget := flag.Duration("min-budget", 50*time.Millisecond, "least deadline of a request")
	maxBudget := flag.Duration("max-budget", 300*time.Millisecond, "largest deadline of a request")
	maxInFlight := flag.Int("max-inflight", 10000, "the client's cap on requests in flight (arrivals beyond it are dropped and counted)")
	seed := flag.Uint64("seed", 16, "seed of the arrivals and deadlines (the same for every variant of a cell)")
	only := flag.String("only", "", "run only the variants whose name contains this (alternatives separated by |; a part ending in $ must end the name)")
	cells := flag.String("cells", "load", "load: the sweep of loads and modes (issue 16); slowdown: the slowdown, saturation and mixed-budget cells (issue 25), with -rounds 3, -warmup 800ms and -duration 2.5s unless set; criticality: the three-hop chain with critical and sheddable traffic (issue 37), with -rounds 3, -warmup 2.5s, -duration 3s, budgets in [600ms, 1.8s] unless set")
	cellFilter := flag.String("cell", "", "with -cells slowdown or criticality: run only the cells whose name (as in the tables' headings) contains this (alternatives separated by |)")
	slots := flag.Int("slots", 4, "with -cells criticality: the backend's slots")
	work := flag.Duration("work", 100*time.Millisecond, "with -cells criticality: the backend's work per request")
	queueOrders := flag.Bool("queue-orders", false, "with -cells slowdown: add deadlinekit's static limit with each queue order (FIFO, LIFO, earliest deadline first) to every cell")
	jsonPath := flag.String("json", "", "also write every cell's results to this file as JSON")
	flag.Parse()
	out := &jsonOut{path: *jsonPath, Command: command(), Time: time.Now().UTC().Format(time.RFC3339), Capacity: admissioncmp.Capacity()}
	if *cells == "slowdown" {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["rounds"] {
			*rounds = 3
		}
		if !set["warmup"] {
			*warmup = 800 * time.Millisecond
		}
		if !set["duration"] {
			*duration = 2500 * time.Millisecond
		}
		if *rounds < 1 || *rounds > 10 || *warmup < 0 || *warmup > 30*time.Second || *duration < time.Second || *duration > 60*time.Second || *maxInFlight < 1 || *maxInFlight > 100000 {
			fmt.Fprintln(os.Stderr, "admissionbench: -rounds in 1..10, -warmup in [0, 30s], -duration in [1s, 60s], -max-inflight in 1..100000")
			os.Exit(2)
		}
		slowdown(*rounds, *warmup, *duration, *seed, *maxInFlight, *only, *cellFilter, *queueOrders, out)
		out.write()
		return
	} else if *cells == "criticality" {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		cfg := chainBase(set, *rounds, *warmup, *duration, *minBudget, *maxBudget, *slots, *work, *seed, *maxInFlight)
		if cfg.Rounds < 1 || cfg.Rounds > 10 || cfg.Warmup < 0 || cfg.Warmup > 30*time.Second || cfg.Duration < 500*time.Millisecond ||
			cfg.Duration > 60*time.Second || cfg.Workers < 1 || cfg.Workers > 64 || cfg.Work < time.Millisecond || cfg.Work > time.Second ||
			cfg.MinBudget <= 0 || cfg.MaxBudget < cfg.MinBudget || cfg.MaxBudget > 10*time.Second || cfg.Capacity() > 1000 {
			fmt.Fprintln(os.Stderr, "admissionbench: -rounds in 1..10, -warmup in [0, 30s], -duration in [0.5s, 60s], -slots in 1..64, -work in [1ms, 1s] with slots/work ≤ 1000/s, 0 < -min-budget ≤ -max-budget ≤ 10s")
			os.Exit(2)
		}
		criticality(cfg, *only, *cellFilter)
		return
	} else if *cells != "load" {
		fmt.Fprintln(os.Stderr, "admissionbench: -cells is load, slowdown or criticality")
		os.Exit(2)
	}
	loads, err1 := parseLoads(*loadsFlag)
	qloads, err2 := parseLoads(*queueLoads)
	modes, err3 := parseModes(*modesFlag)
	if err := cmpErr(err1, err2, err3); err != nil || len(loads)+len(qloads) == 0 || *warmup < 0 || *warmup > 30*time.Second ||
		*duration <= 0 || *duration > 60*time.Second || *rounds < 1 || *rounds > 10 || *minBudget <= 0 || *maxBudget < *minBudget ||
		*maxBudget > 10*time.Second || *maxInFlight < 1 || *maxInFlight > 100000 {
		if err != nil {
			fmt.Fprintln(os.Stderr, "admissionbench:", err)
		}
		fmt.Fprintln(os.Stderr, "admissionbench: -loads and -queue-loads in (0, 10], -modes of stops,ignores, -warmup in [0, 30s], -duration in (0, 60s], -rounds in 1..10, 0 < -min-budget ≤ -max-budget ≤ 10s, -max-inflight in 1..100000")
		os.Exit(2)
	}
	var vs, qs []admissioncmp.Variant
	for _, v := range admissioncmp.Variants() {
		if matches(v.Name, *only) {
			vs = append(vs, v)
		}
	}
	for _, v := range admissioncmp.QueueVariants() {
		if matches(v.Name, *only) {
			qs = append(qs, v)
		}
	}
	cell := func(m admissioncmp.Mode, load float64) admissioncmp.Config {
		return admissioncmp.Config{Mode: m, Load: load, MinBudget: *minBudget, MaxBudget: *maxBudget, Warmup: *warmup,
			Duration: *duration, Rounds: *rounds, Seed: *seed, MaxInFlight: *maxInFlight}
	}
	per := (*warmup + *duration + *maxBudget) * time.Duration(*rounds)
	total := per * time.Duration(len(modes)*(len(loads)*len(vs)+len(qloads)*len(qs)))
	fmt.Fprintf(os.Stderr, "admissionbench: %d variants × %d loads + %d queue orders × %d loads, × %d modes; about %v\n",
		len(vs), len(loads), len(qs), len(qloads), len(modes), total.Round(time.Second))

	fmt.Printf("Command: `%s`\n\n", command())
	fmt.Printf("%s, %s, GOMAXPROCS %d; server on 127.0.0.1 (h2c): %d worker slots × %v of work = %.0f requests/s capacity; open-loop Poisson arrivals, deadlines uniform in [%v, %v] sent as grpc-timeout; per variant and cell %v of warm-up (not counted) then %v measured, × %d round(s), variants one after another, seed %d\n\n",
		time.Now().UTC().Format(time.RFC3339), runtime.Version(), runtime.GOMAXPROCS(0), admissioncmp.Workers, admissioncmp.Work,
		admissioncmp.Capacity(), *minBudget, *maxBudget, *warmup, *duration, *rounds, *seed)

	for _, m := range modes {
		var all [][]admissioncmp.Result
		for _, load := range loads {
			fmt.Fprintf(os.Stderr, "%s, %g× ...\n", m, load)
			rs, err := admissioncmp.Run(vs, cell(m, load))
			if err != nil {
				fmt.Fprintln(os.Stderr, "admissionbench:", err)
				os.Exit(1)
			}
			all = append(all, rs)
			out.add(fmt.Sprintf("%s, %g×", shortMode(m), load), cell(m, load), rs)
		}
		if len(all) == 0 {
			continue
		}
		fmt.Printf("## Handler %s\n\n", m)
		summary(all, loads)
		for i, rs := range all {
			fmt.Printf("#### %s, %g× capacity (%.0f requests/s offered)\n\n", m, loads[i], loads[i]*admissioncmp.Capacity())
			detail(rs)
		}
	}

	if len(qloads) > 0 && len(qs) > 0 {
		fmt.Printf("## Queue order of deadlinekit's static limit (%d slots, queue of %d) under overload\n\n", admissioncmp.Workers, admissioncmp.QueueLength)
		fmt.Println("| order | mode | load | goodput req/s (% of capacity) | wasted work | answers p50 / p99 | refusals p99 | refused (statuses) | no answer in time | harness: sent, errors, lag |")
		fmt.Println("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
		for _, m := range modes {
			for _, load := range qloads {
				fmt.Fprintf(os.Stderr, "queue orders, %s, %g× ...\n", m, load)
				rs, err := admissioncmp.Run(qs, cell(m, load))
				if err != nil {
					fmt.Fprintln(os.Stderr, "admissionbench:", err)
					os.Exit(1)
				}
				for _, r := range rs {
					fmt.Printf("| %s | %s | %g× | %.0f (**%.0f%%**) | %s | %s / %s | %s | %s%s | %s | %d, %d, %s |\n", strings.TrimPrefix(r.Variant, "deadlinekit static limit 8, queue "),
						shortMode(m), load, r.Goodput(), 100*r.Goodput()/admissioncmp.Capacity(), pctStr(r.WastedShare()),
						ms(r.AnswerP50), ms(r.AnswerP99), ms(r.RefusalP99), share(r.Refused, r.Sent), statuses(r.Statuses), share(r.NoAnswer, r.Sent),
						r.Sent, r.Errors, ms(r.Lag))
				}
			}
		}
		fmt.Println()
	}

	fmt.Println("Goodput: 200 answers received before their deadline, per measured second, and as a share of the capacity (at 0.5× at most 50% can be). Wasted work: the slot time spent on requests whose context had ended when their work ended (deadline passed, or the caller gone), as a share of all slot time, over the work that ended after the warm-up (the warm-up's backlog included). Refused: an answer other than 200 before the deadline (the guard's: shortcircuit 504 cannot finish in time / 503 overloaded, failsafe-go and go-concurrency-limits 429); no answer in time: the client's deadline passed first, or the handler's own 504 when its context ended (mode stops). Latencies are the client's, from sending to the end of the answer. Peak in the handler: the most requests inside the handler at once, waiting for one of its 8 slots or holding one: the concurrency the guard let through. Harness: arrivals dropped by the client's in-flight cap, unexpected errors, handlers still waiting for a slot at the run's end (their callers long gone; released without working), and the generator's worst lateness.")
	fmt.Println()
	fmt.Println("Variants:")
	for _, v := range append(vs, qs...) {
		fmt.Println("- " + v.Name + ": " + v.Note)
	}
	out.write()
}

// chainBase is the chain cells' base configuration: the flags, with the
// criticality cells' defaults for those not set.
func chainBase(set map[string]bool, rounds int, warmup, duration, minBudget, maxBudget time.Duration, slots int, work time.Duration, seed uint64, maxInFlight int) admissioncmp.ChainConfig {
	c := admissioncmp.ChainConfig{Workers: slots, Work: work, Rounds: 3, Warmup: 2500 * time.Millisecond, Duration: 3 * time.Second,
		MinBudget: 600 * time.Millisecond, MaxBudget: 1800 * time.Millisecond, Seed: seed, MaxInFlight: maxInFlight}
	if set["rounds"] {
		c.Rounds = rounds
	}
	if set["warmup"] {
		c.Warmup = warmup
	}
	if set["duration"] {
		c.Duration = duration
	}
	if set["min-budget"] {
		c.MinBudget = minBudget
	}
	if set["max-budget"] {
		c.MaxBudget = maxBudget
	}
	return c
}

// jsonOut collects the cells for -json.
type jsonOut struct {
	path     string
	Command  string
	Time     string
	Capacity float64 // requests per second
	Cells    []jsonCell
}

type jsonCell struct {
	Name    string
	Config  admissioncmp.Config
	Results []admissioncmp.Result
}

func (o *jsonOut) add(name string, cfg admissioncmp.Config, rs []admissioncmp.Result) {
	if o.path != "" {
		o.Cells = append(o.Cells, jsonCell{name, cfg, rs})
	}
}

func (o *jsonOut) write() {
	if o.path == "" {
		return
	}
	b, err := json.Marshal(o)
	if err == nil {
		err = os.WriteFile(o.path, append(b, '\n'), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "admissionbench:", err)
		os.Exit(1)
	}
}

// summary prints goodput and wasted work of every variant at every load.
func summary(all [][]admissioncmp.Result, loads []float64) {
	head := "| variant |"
	rule := "| --- |"
	for _, l := range loads {
		head += fmt.Sprintf(" %g× |", l)
		rule += " ---: |"
	}
	fmt.Println("Goodput, % of capacity (wasted work, % of slot time):")
	fmt.Println()
	fmt.Println(head)
	fmt.Println(rule)
	for j := range all[0] {
		line := "| " + all[0][j].Variant + " |"
		for i := range all {
			r := all[i][j]
			line += fmt.Sprintf(" **%.0f%%** (%s) |", 100*r.Goodput()/admissioncmp.Capacity(), pctStr(r.WastedShare()))
		}
		fmt.Println(line)
	}
	fmt.Println()
}

// detail prints one cell.
func detail(rs []admissioncmp.Result) {
	fmt.Println("| variant | goodput req/s (% of capacity) | wasted work | answers p50 / p99 | refusals p99 | refused (statuses) | no answer in time | peak in the handler | harness: sent, dropped, errors, cut, lag |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, r := range rs {
		errs := strconv.Itoa(r.Errors)
		if r.FirstError != "" {
			errs += " (" + r.FirstError + ")"
		}
		fmt.Printf("| %s | %.0f (**%.0f%%**) | %s | %s / %s | %s | %s%s | %s | %d | %d, %d, %s, %d, %s |\n", r.Variant, r.Goodput(),
			100*r.Goodput()/admissioncmp.Capacity(), pctStr(r.WastedShare()), ms(r.AnswerP50), ms(r.AnswerP99), ms(r.RefusalP99),
			share(r.Refused, r.Sent), statuses(r.Statuses), share(r.NoAnswer, r.Sent), r.Peak, r.Sent, r.Dropped, errs, r.Cut, ms(r.Lag))
	}
	fmt.Println()
}

func statuses(m map[int]int) string {
	if len(m) == 0 {
		return ""
	}
	var codes []int
	for c := range m {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d: %d", c, m[c]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func parseLoads(s string) ([]float64, error) {
	var out []float64
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || !(v > 0 && v <= 10) {
			return nil, fmt.Errorf("bad load %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func parseModes(s string) ([]admissioncmp.Mode, error) {
	var out []admissioncmp.Mode
	for f := range strings.SplitSeq(s, ",") {
		switch strings.TrimSpace(f) {
		case "stops":
			out = append(out, admissioncmp.Stops)
		case "ignores":
			out = append(out, admissioncmp.Ignores)
		case "":
		default:
			return nil, fmt.Errorf("bad mode %q", f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no mode")
	}
	return out, nil
}

func cmpErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func shortMode(m admissioncmp.Mode) string {
	if m == admissioncmp.Stops {
		return "stops"
	}
	return "ignores"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func pctStr(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }

func share(n, of int) string {
	if of == 0 {
		return strconv.Itoa(n)
	}
	return fmt.Sprintf("%d (%.1f%%)", n, 100*float64(n)/float64(of))
}

// command is the command line that was run, quoted for a shell.
func command() string {
	args := []string{"cd bench && go run ./cmd/admissionbench"}
	for _, a := range os.Args[1:] {
		if a == "" || strings.ContainsAny(a, " \t'\"*?$&|;<>()") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		args = append(args, a)
	}
	return strings.Join(args, " ")
}
