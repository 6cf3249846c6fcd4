// Command breakerbench compares HTTP circuit breakers side by side in one run:
// deadlinekit's breaker, sony/gobreaker v2 and failsafe-go's circuitbreaker, each at
// its documented defaults and at settings matched to deadlinekit's (20 failures in a
// row, or min calls 20 and failure ratio 0.6 in a 10 s window; open 5 s, one probe),
// every variant with its own
// downstream on 127.0.0.1 and its own open-loop load, all at the same time:
//
//	cd bench && go run ./cmd/breakerbench
//
// It prints markdown tables: an outage (the downstream answers 503 for -outage, then
// recovers), false opens on a healthy downstream when 30% of the callers cancel early
// or arrive with a budget below its median latency, and the closed path's cost per
// call (Go benchmarks around a no-op RoundTripper).
//
// It talks to 127.0.0.1 only, and every run is bounded in rate (-rate), time
// (-warmup, -outage, -cap, -neutral) and budget (-budget): with the defaults the
// whole run takes under 2 minutes, most of it waiting for the peers' 60 s default
// open state to end (-cap).
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit/bench/breakercmp"
)

func main() {
	rate := flag.Float64("rate", 200, "requests per second per variant (open loop)")
	budget := flag.Duration("budget", time.Second, "budget (context deadline) of each request")
	warmup := flag.Duration("warmup", 10*time.Second, "healthy traffic before the outage (10 s fills the matched breakers' window)")
	outage := flag.Duration("outage", 10*time.Second, "how long the downstream answers 503")
	capd := flag.Duration("cap", 65*time.Second, "how long the recovery is watched at most, waiting for every breaker to close")
	neutral := flag.Duration("neutral", 5*time.Second, "duration of each false-open scenario, after a 1 s plain warm-up")
	count := flag.Int("count", 3, "runs of each closed-path benchmark (the median is printed)")
	seed := flag.Uint64("seed", 15, "seed of the draw that picks the cancelled or starved calls")
	only := flag.String("only", "", "run only the variants whose name contains this")
	flag.Parse()
	if !(*rate >= 1 && *rate <= 1000) || *budget <= 0 || *budget > 10*time.Second || *warmup <= 0 || *warmup > 20*time.Second ||
		*outage <= 0 || *outage > 30*time.Second || *capd < 0 || *capd > 120*time.Second || *neutral <= 0 || *neutral > 30*time.Second ||
		*count < 0 || *count > 10 {
		fmt.Fprintln(os.Stderr, "breakerbench: -rate in 1..1000, -budget in (0, 10s], -warmup in (0, 20s], -outage in (0, 30s], -cap in [0, 120s], -neutral in (0, 30s], -count in 0..10")
		os.Exit(2)
	}
	var vs []breakercmp.Variant
	for _, v := range breakercmp.Variants() {
		if *only == "" || strings.Contains(v.Name, *only) {
			vs = append(vs, v)
		}
	}

	fmt.Printf("Command: `%s`\n\n", strings.Join(append([]string{"cd bench && go run ./cmd/breakerbench"}, os.Args[1:]...), " "))
	fmt.Printf("%s, %s, GOMAXPROCS %d; every variant has its own downstream on 127.0.0.1, its own client and its own load, all variants at the same time\n\n",
		time.Now().UTC().Format(time.RFC3339), runtime.Version(), runtime.GOMAXPROCS(0))

	ocfg := breakercmp.OutageConfig{Rate: *rate, Budget: *budget, Delay: 5 * time.Millisecond, Warmup: *warmup, Outage: *outage, Cap: *capd}
	fmt.Fprintf(os.Stderr, "outage: %v + %v + up to %v...\n", ocfg.Warmup, ocfg.Outage, ocfg.Cap)
	os_, err := breakercmp.RunOutage(vs, ocfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "breakerbench:", err)
		os.Exit(1)
	}
	fmt.Printf("### Outage: %.0f requests/s, budget %v each; %v healthy (answers in %v), then the downstream answers 503 for %v, then recovers (watched up to %v)\n\n",
		ocfg.Rate, ocfg.Budget, ocfg.Warmup, ocfg.Delay, ocfg.Outage, ocfg.Cap)
	fmt.Println("| variant | requests in the outage | calls reaching the dead downstream | of them sent before it opened / after | refused by the breaker | time to open | recovery → closed | healthy requests refused after recovery | opens | harness: outage requests answered 200, requests failed before it (other than by a 503) |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, r := range os_ {
		toClosed := ms(r.ToClosed)
		if r.ToClosed < 0 {
			toClosed = fmt.Sprintf("not within %s", secs(r.Watched))
		}
		open := ms(r.TimeToOpen)
		if r.TimeToOpen < 0 {
			open = "did not open"
		}
		fmt.Printf("| %s | %d | **%d** | %d / %d | %d | %s | %s | %d | %d | %d, %d |\n", r.Variant, r.Requests, r.DownCalls, r.BeforeOpen, r.WhileOpen, r.Refused, open, toClosed, r.RefusedAfter, r.Opens, r.OutageOK, r.WarmupErrors)
	}
	fmt.Println()

	var ns [2][]breakercmp.NeutralResult
	for i, kind := range []breakercmp.Neutral{breakercmp.Cancel, breakercmp.Starved} {
		ncfg := breakercmp.NeutralConfig{Kind: kind, Rate: *rate, Share: 0.3, Budget: *budget, Delay: 20 * time.Millisecond,
			CancelAfter: 5 * time.Millisecond, StarvedBudget: 5 * time.Millisecond, Warmup: time.Second, Duration: *neutral, Seed: *seed}
		fmt.Fprintf(os.Stderr, "%s: %v + %v...\n", kind, ncfg.Warmup, ncfg.Duration)
		ns[i], err = breakercmp.RunNeutral(vs, ncfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "breakerbench:", err)
			os.Exit(1)
		}
	}
	fmt.Printf("### False opens on a healthy downstream (answers in 20 ms): %.0f requests/s, budget %v; 1 s of plain traffic, then %v in which 30%% of the calls (a seeded draw, the same for every variant) are cancelled by their caller 5 ms after sending, or (a second run) carry a 5 ms budget\n\n", *rate, *budget, *neutral)
	fmt.Println("| variant | cancellations: opens | refused | counted as failures | starved budgets: opens | refused | counted as failures | harness: as planned / planned of the calls after the warm-up (cancel; starved), median latency, longest run of planned calls in the order they ended |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	for j := range ns[0] {
		c, s := ns[0][j], ns[1][j]
		fmt.Printf("| %s | **%d** | %d | %d | **%d** | %d | %d | %d/%d of %d; %d/%d of %d; %s, %s; %d, %d |\n", c.Variant,
			c.Opens, c.Refused, c.Failures, s.Opens, s.Refused, s.Failures,
			c.AsPlanned, c.Planned, c.Scripted, s.AsPlanned, s.Planned, s.Scripted, ms(c.Median), ms(s.Median), c.LongestRun, s.LongestRun)
	}
	fmt.Println()
	fmt.Println("As planned: a cancelled call ended with context.Canceled, a starved one with context.DeadlineExceeded; calls refused by an open breaker are neither. Longest run: the most planned calls in a row (refusals left out), what gobreaker's default (more than 5 consecutive failures) trips on; it depends on the seeded draw (-seed).")
	fmt.Println()

	if *count > 0 {
		fmt.Printf("### Closed path per call: one GET through each around a no-op RoundTripper, 1 h budget; testing.Benchmark, median of %d\n\n", *count)
		fmt.Println("| transport | ns/op | allocs/op | B/op |")
		fmt.Println("| --- | ---: | ---: | ---: |")
		for _, p := range breakercmp.ClosedPaths() {
			if *only != "" && !strings.Contains(p.Name, *only) && strings.Contains(p.Name, ",") && !strings.HasPrefix(p.Name, "deadlinekit.") {
				continue
			}
			fmt.Fprintf(os.Stderr, "benchmark %s...\n", p.Name)
			var rs []testing.BenchmarkResult
			for range *count {
				rs = append(rs, testing.Benchmark(func(b *testing.B) { breakercmp.BenchClosed(b, p) }))
			}
			slices.SortFunc(rs, func(a, b testing.BenchmarkResult) int { return int(a.NsPerOp() - b.NsPerOp()) })
			m := rs[len(rs)/2]
			fmt.Printf("| %s | %d (%d … %d) | %d | %d |\n", p.Name, m.NsPerOp(), rs[0].NsPerOp(), rs[len(rs)-1].NsPerOp(), m.AllocsPerOp(), m.AllocedBytesPerOp())
		}
		fmt.Println()
	}

	fmt.Println("Variants:")
	for _, v := range vs {
		fmt.Println("- " + v.Name + ": " + v.Note)
	}
}

func ms(d time.Duration) string   { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
