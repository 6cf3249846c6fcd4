package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/deadlinekit/deadlinekit/bench/hedgecmp"
)

// sweep runs the sweep variants (those whose name contains only, and the peer; all
// when only is empty) on seeds first..first+n-1 of each distribution, the variants
// interleaved per seed, and prints per seed the p99.9 and extra load of each, then
// their min, median and max. With trace, it also prints deadlinekit's delay over
// each run.
func sweep(first uint64, n int, dists, only string, cfg hedgecmp.Config, trace bool) {
	for _, name := range strings.Split(dists, ",") {
		var d hedgecmp.Dist
		switch name {
		case "disclosed":
			d = hedgecmp.DefaultTail
		case "hidden":
			d = hedgecmp.HiddenTail
		default:
			fmt.Fprintf(os.Stderr, "hedgebench: unknown distribution %q (disclosed, hidden)\n", name)
			os.Exit(2)
		}
		q := hedgecmp.TrueQuantiles(d, 0.95, 0.99, 0.999)
		o := hedgecmp.Oracle{P95: q[0], P99: q[1]}
		fmt.Printf("### %s: %s\n\nTrue quantiles (a million draws): P95 %s, P99 %s, P99.9 %s. %d calls per run, %d at once.\n\n",
			name, d, ms(q[0]), ms(q[1]), ms(q[2]), cfg.Calls, cfg.Concurrency)
		vs := sweepVariants(only)
		runs := make([][]hedgecmp.SweepRun, len(vs))
		for seed := first; seed < first+uint64(n); seed++ {
			for i, v := range vs {
				fmt.Fprintf(os.Stderr, "%s seed %d: %s\n", name, seed, v.Name)
				r, err := hedgecmp.RunOne(v, d, o, seed, cfg)
				if err != nil {
					fmt.Fprintln(os.Stderr, "hedgebench:", err)
					os.Exit(1)
				}
				runs[i] = append(runs[i], r)
			}
		}
		sweepTable(vs, runs)
		if trace {
			traces(vs, runs)
		}
	}
}

// sweepVariants returns the sweep variants whose name contains only, the peer (the
// second variant, which the table compares each with) kept second; all of them
// when only is empty or matches none but the peer.
func sweepVariants(only string) []hedgecmp.SweepVariant {
	all := hedgecmp.SweepVariants()
	var match []hedgecmp.SweepVariant
	for i, v := range all {
		if i != 1 && strings.Contains(v.Name, only) {
			match = append(match, v)
		}
	}
	if only == "" || len(match) == 0 {
		return all
	}
	return append([]hedgecmp.SweepVariant{match[0], all[1]}, match[1:]...)
}

func sweepTable(vs []hedgecmp.SweepVariant, runs [][]hedgecmp.SweepRun) {
	fmt.Print("| seed |")
	for _, v := range vs {
		fmt.Printf(" %s: p99.9 (extra load) |", v.Name)
	}
	fmt.Print("\n| ---: |" + strings.Repeat(" ---: |", len(vs)) + "\n")
	for s := range runs[0] {
		fmt.Printf("| %d |", runs[0][s].Seed)
		for i := range vs {
			r := runs[i][s].Result
			errs := ""
			if r.Errors > 0 {
				errs = fmt.Sprintf(", %d errors", r.Errors)
			}
			fmt.Printf(" %s (%.1f%%%s) |", ms(r.P999), 100*r.ExtraLoad(), errs)
		}
		fmt.Println()
	}
	for _, stat := range []string{"min", "median", "max"} {
		fmt.Printf("| **%s** |", stat)
		for i := range vs {
			var p, x []float64
			for _, r := range runs[i] {
				p = append(p, float64(r.Result.P999)/float64(time.Millisecond))
				x = append(x, 100*r.Result.ExtraLoad())
			}
			fmt.Printf(" %.1f ms (%.1f%%) |", pick(p, stat), pick(x, stat))
		}
		fmt.Println()
	}
	fmt.Println()
	// Each variant's p99.9 against the peer's (the second variant), seed by seed.
	for i := range vs {
		if i == 1 {
			continue
		}
		at := 0
		for s := range runs[i] {
			if runs[i][s].Result.P999 <= runs[1][s].Result.P999 {
				at++
			}
		}
		fmt.Printf("- %s: p99.9 at or below %s's in %d of %d seeds\n", vs[i].Name, vs[1].Name, at, len(runs[i]))
	}
	fmt.Println()
}

// pick returns the min, median (the lower middle for an even count: a value that
// was measured) or max of xs.
func pick(xs []float64, stat string) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	switch stat {
	case "min":
		return s[0]
	case "max":
		return s[len(s)-1]
	}
	return s[(len(s)-1)/2]
}

func traces(vs []hedgecmp.SweepVariant, runs [][]hedgecmp.SweepRun) {
	for i, v := range vs {
		for _, r := range runs[i] {
			if len(r.Trace) == 0 {
				continue
			}
			var b strings.Builder
			for _, d := range r.Trace {
				fmt.Fprintf(&b, " %.0f", float64(d)/float64(time.Millisecond))
			}
			lat := r.Result.Latencies
			var top strings.Builder
			for _, d := range lat[max(len(lat)-6, 0):] {
				fmt.Fprintf(&top, " %.0f", float64(d)/float64(time.Millisecond))
			}
			fmt.Printf("- %s seed %d (hedges %d, won %d, refused by the cap %d; slowest calls, ms:%s), delay in ms every %v:%s\n",
				v.Name, r.Seed, r.Hedges, r.Wins, r.Refused, top.String(), hedgecmp.TraceEvery, b.String())
		}
	}
	fmt.Println()
}
