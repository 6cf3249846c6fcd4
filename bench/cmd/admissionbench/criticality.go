package main

import (
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/deadlinekit/deadlinekit/bench/admissioncmp"
)

// criticalityCells are issue 37's cells: the chain unloaded (its critical traffic
// alone at a tenth of the capacity, for the unloaded p99), offered 4× and 10× the
// backend's capacity with critical traffic at 40% of it, and 10× again with
// refusals that cost the backend a tenth of a request's work.
func criticalityCells(base admissioncmp.ChainConfig) []admissioncmp.ChainConfig {
	cell := func(name string, load, critical, cost float64) admissioncmp.ChainConfig {
		c := base
		c.Name, c.Load, c.Critical, c.RefusalCost = name, load, critical, cost
		return c
	}
	return []admissioncmp.ChainConfig{
		cell("unloaded", 0.1, 0.1, 0),
		cell("4x", 4, 0.4, 0),
		cell("10x", 10, 0.4, 0),
		cell("10x-refusal-cost", 10, 0.4, 0.1),
	}
}

// criticality runs the chain cells and prints a table per cell, the RESULT lines
// and the goals against the figures.
func criticality(base admissioncmp.ChainConfig, only, cellFilter string) {
	var vs []admissioncmp.ChainVariant
	for _, v := range admissioncmp.ChainVariants() {
		if matches(v.Name, only) {
			vs = append(vs, v)
		}
	}
	var cells []admissioncmp.ChainConfig
	for _, c := range criticalityCells(base) {
		if c.Name == "unloaded" || matches(c.Name, cellFilter) {
			cells = append(cells, c)
		}
	}
	per := base.Warmup + base.Duration + base.MaxBudget + 200*time.Millisecond
	fmt.Fprintf(os.Stderr, "admissionbench: %d variants × %d cells × %d rounds; about %v\n", len(vs), len(cells), base.Rounds,
		(per * time.Duration(len(vs)*len(cells)*base.Rounds)).Round(time.Second))
	fmt.Printf("Command: `%s`\n\n", command())
	fmt.Printf("%s, %s, GOMAXPROCS %d; client → gateway (edge) → service → backend, loopback h2c, separate listeners; backend %d slots × %v = %.0f requests/s; open loop at a fixed rate, deadlines uniform in [%v, %v]; per variant and cell %v of warm-up then %v measured, %d rounds alternating the order, medians; seed %d\n\n",
		time.Now().UTC().Format(time.RFC3339), runtime.Version(), runtime.GOMAXPROCS(0), base.Workers, base.Work, base.Capacity(),
		base.MinBudget, base.MaxBudget, base.Warmup, base.Duration, base.Rounds, base.Seed)
	unloaded := map[string]time.Duration{}
	var lines []string
	for _, c := range cells {
		fmt.Fprintf(os.Stderr, "%s ...\n", c.Name)
		rs, err := admissioncmp.RunChain(vs, c)
		if err != nil {
			fmt.Fprintln(os.Stderr, "admissionbench:", err)
			os.Exit(1)
		}
		fmt.Printf("### %s: %.0f requests/s offered (%.0f critical), refusals cost %.0f%% of a request's work\n\n", c.Name, c.Load*c.Capacity(), c.Critical*c.Capacity(), 100*c.RefusalCost)
		fmt.Println("| variant | critical goodput (rounds) | total goodput (% of capacity) | critical p99 (× unloaded) | refusal work | work (rounds) | critical lost, where (all rounds) |")
		fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
		for _, r := range rs {
			if c.Name == "unloaded" {
				unloaded[r.Variant] = r.Med.CriticalP99
			}
			ratio := ""
			if u := unloaded[r.Variant]; u > 0 {
				ratio = fmt.Sprintf(" (%.2f×)", float64(r.Med.CriticalP99)/float64(u))
			}
			fmt.Printf("| %s | %.2f%% (%s) | %.1f%% | %s%s | %.1f%% | %.1f%% (%s) | %s |\n", r.Variant, 100*r.Med.CriticalGoodput,
				perRound(r.Rounds, func(f admissioncmp.ChainFig) float64 { return f.CriticalGoodput }), 100*r.Med.TotalGoodput,
				ms(r.Med.CriticalP99), ratio, 100*r.Med.RefusalWork, 100*r.Med.BusyWork,
				perRound(r.Rounds, func(f admissioncmp.ChainFig) float64 { return f.BusyWork }), lostStr(r.Lost, r.Med.Critical))
			lines = append(lines, r.ResultLine())
		}
		fmt.Println()
	}
	fmt.Println("Critical goodput: critical requests answered 2xx within their deadline, share of those sent; total goodput: all such answers per second, share of the backend's capacity; critical p99: the client's latency of the critical answers (× the same variant's in the unloaded cell); refusal work and work: the backend's slot time spent on refusals and on work, share of its capacity (slots × measured time). Lost: the critical requests not answered in time, by where (backend: its guard's refusal; gateway/service: its client's; client: the status the client got, or no answer).")
	fmt.Println()
	fmt.Println("Variants:")
	for _, v := range vs {
		fmt.Println("- " + v.Name + ": " + v.Note)
	}
	fmt.Println()
	for _, l := range lines {
		fmt.Println(l)
	}
}

// perRound lists a figure of each round, as a percentage.
func perRound(fs []admissioncmp.ChainFig, get func(admissioncmp.ChainFig) float64) string {
	var parts []string
	for _, f := range fs {
		parts = append(parts, fmt.Sprintf("%.0f", 100*get(f)))
	}
	return strings.Join(parts, ", ")
}

// lostStr lists the losses, most first, of n critical requests.
func lostStr(m map[string]int, n int) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return fmt.Sprintf("none of %d", n)
	}
	return strings.Join(parts, "; ") + fmt.Sprintf(" (of %d)", n)
}
