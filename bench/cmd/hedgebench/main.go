// Command hedgebench compares hedging HTTP clients against one loopback backend with
// a heavy-tailed latency (98% about 5 ms, 1.5% about 50 ms, 0.5% about 500 ms, drawn
// independently per request) and prints markdown tables: latency percentiles and
// extra load (backend requests / calls − 1) per variant, then the same after a
// latency shift (mid-run, every request becomes 10× slower).
//
//	cd bench && go run ./cmd/hedgebench
//
// It talks to 127.0.0.1 only, and every run is bounded in calls (-calls) and time
// (-max-time per variant).
//
// With -seeds N it runs the sweep instead: seeds 1..N (from -first) of each distribution of -dists
// (disclosed: the tables' tail; hidden: a lognormal body with a Pareto tail, fixed
// before any result on it was seen), deadlinekit, failsafe-go's quantile hedge and the
// oracles (a fixed delay at the distribution's true quantile) interleaved per seed,
// and prints per seed the p99.9 and extra load of each, then their min, median and
// max; -trace adds deadlinekit's delay every 100 ms of each run and its slowest calls:
//
//	cd bench && go run ./cmd/hedgebench -seeds 10
//
// With -csv FILE it also writes every call's latency, one line per call
// (run,variant,latency_ms; run is steady or shift), for cmd/plots.
package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/deadlinekit/deadlinekit/bench/hedgecmp"
)

func main() {
	calls := flag.Int("calls", 4000, "calls per variant")
	shiftCalls := flag.Int("shift-calls", 4000, "calls per variant in the latency-shift run (0: skip it)")
	conc := flag.Int("concurrency", 16, "calls in flight at once")
	maxTime := flag.Duration("max-time", 60*time.Second, "longest run of one variant")
	seed := flag.Uint64("seed", 1, "seed of the backend's latencies")
	only := flag.String("only", "", "run only the variants whose name contains this")
	csvPath := flag.String("csv", "", "also write every call's latency to this file (run,variant,latency_ms)")
	seeds := flag.Int("seeds", 0, "sweep mode: run the sweep variants on seeds 1..N of each -dists distribution, interleaved per seed (0: the tables instead)")
	dists := flag.String("dists", "disclosed,hidden", "sweep mode: the distributions, comma-separated: disclosed (the tables' tail), hidden (lognormal body, Pareto tail)")
	trace := flag.Bool("trace", false, "sweep mode: also print deadlinekit's delay every 100 ms of each run")
	first := flag.Uint64("first", 1, "sweep mode: the first seed (seeds first..first+N-1); with -only, the sweep runs the matching variants and failsafe-go's, its peer")
	flag.Parse()
	if *calls < 1 || *conc < 1 || *calls > 1_000_000 || *conc > 1024 || *seeds < 0 || *seeds > 100 || *first < 1 || *first > 1_000_000 {
		fmt.Fprintln(os.Stderr, "hedgebench: -calls must be in 1..1000000, -concurrency in 1..1024, -seeds in 0..100, -first in 1..1000000")
		os.Exit(2)
	}
	if *seeds > 0 {
		fmt.Printf("Command: `cd bench && go run ./cmd/hedgebench %s`; %s\n\n", strings.Join(os.Args[1:], " "), time.Now().UTC().Format(time.RFC3339))
		sweep(*first, *seeds, *dists, *only, hedgecmp.Config{Calls: *calls, Concurrency: *conc, CallTimeout: 10 * time.Second, MaxTime: *maxTime}, *trace)
		return
	}

	b, err := hedgecmp.NewBackend(hedgecmp.DefaultTail, *seed)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hedgebench:", err)
		os.Exit(1)
	}
	defer b.Close()

	fmt.Printf("Command: `cd bench && go run ./cmd/hedgebench %s`\n\n", strings.Join(os.Args[1:], " "))
	fmt.Printf("Backend on 127.0.0.1, latency per request: 98%% ~5 ms, 1.5%% ~50 ms, 0.5%% ~500 ms (±20%%); concurrency %d; %s\n\n", *conc, time.Now().UTC().Format(time.RFC3339))

	cfg := hedgecmp.Config{Calls: *calls, Concurrency: *conc, CallTimeout: 10 * time.Second, MaxTime: *maxTime}
	results, notes := runAll(b, cfg, *only, 0)
	var shifted []hedgecmp.Result
	fmt.Println("### Steady tail")
	fmt.Println()
	table(results, false)
	if len(results) > 1 && results[0].Variant == "no hedging" {
		for _, r := range results[1:] {
			if r.P999 > 0 {
				fmt.Printf("- %s: p99.9 %.1f× lower than no hedging, extra load %.1f%%\n", r.Variant, float64(results[0].P999)/float64(r.P999), 100*r.ExtraLoad())
			}
		}
		fmt.Println()
	}

	if *shiftCalls > 0 {
		cfg.Calls, cfg.ShiftAt = *shiftCalls, *shiftCalls/2
		// The fixed delays stay at the steady P99, as configured before the shift.
		var steadyP99 time.Duration
		if len(results) > 0 {
			steadyP99 = results[0].P99
		}
		shifted, _ = runAll(b, cfg, *only, steadyP99)
		fmt.Printf("### Latency shift: after %d calls every request becomes 10× slower\n\n", cfg.ShiftAt)
		table(shifted, true)
	}
	fmt.Println("Variants:")
	for _, n := range notes {
		fmt.Println("- " + n)
	}
	if *csvPath != "" {
		if err := writeCSV(*csvPath, results, shifted); err != nil {
			fmt.Fprintln(os.Stderr, "hedgebench:", err)
			os.Exit(1)
		}
	}
}

// writeCSV writes every call's latency of both runs, one line per call.
func writeCSV(path string, steady, shifted []hedgecmp.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"run", "variant", "latency_ms"})
	for _, run := range []struct {
		name string
		rs   []hedgecmp.Result
	}{{"steady", steady}, {"shift", shifted}} {
		for _, r := range run.rs {
			for _, d := range r.Latencies {
				_ = w.Write([]string{run.name, r.Variant, strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)})
			}
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runAll runs every variant on a fresh base transport; the fixed-delay variants use
// p99, or when it is zero the P99 measured by the first variant (no hedging).
func runAll(b *hedgecmp.Backend, cfg hedgecmp.Config, only string, p99 time.Duration) ([]hedgecmp.Result, []string) {
	var results []hedgecmp.Result
	var notes []string
	for i, v := range hedgecmp.Variants() {
		if i > 0 && only != "" && !strings.Contains(v.Name, only) {
			continue
		}
		rt, note, err := v.Build(hedgecmp.NewBaseTransport(cfg.Concurrency), p99)
		if err != nil {
			fmt.Fprintf(os.Stderr, "hedgebench: %s: %v\n", v.Name, err)
			continue
		}
		fmt.Fprintf(os.Stderr, "running %s (%d calls)...\n", v.Name, cfg.Calls)
		r := hedgecmp.Run(v.Name, rt, b, cfg)
		if i == 0 && p99 == 0 {
			p99 = r.P99
		}
		results = append(results, r)
		if note != "" {
			notes = append(notes, v.Name+": "+note)
		}
	}
	return results, notes
}

func table(rs []hedgecmp.Result, shift bool) {
	if shift {
		fmt.Println("| variant | calls | errors | p50 | p99 | p99.9 | max | extra load (whole run) | extra load after the shift |")
		fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	} else {
		fmt.Println("| variant | calls | errors | p50 | p99 | p99.9 | max | backend requests | extra load |")
		fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	}
	for _, r := range rs {
		fmt.Printf("| %s | %d | %d | %s | %s | %s | %s | ", r.Variant, r.Calls, r.Errors, ms(r.P50), ms(r.P99), ms(r.P999), ms(r.Max))
		if shift {
			fmt.Printf("%.1f%% | %.1f%% |\n", 100*r.ExtraLoad(), 100*r.ExtraLoadAfter())
		} else {
			fmt.Printf("%d | %.1f%% |\n", r.Requests, 100*r.ExtraLoad())
		}
	}
	fmt.Println()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
