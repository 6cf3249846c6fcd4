// Command retrybench compares retry layers in one outage: a 3-layer gRPC chain on
// loopback (user client → layer 1 → layer 2 → bottom service, grpc-go's interop
// TestService) whose bottom service answers UNAVAILABLE, with the same retry library,
// configured for 3 attempts, on every arrow.
//
//	cd bench && go run ./cmd/retrybench
//
// It prints markdown tables: first user requests one after the other, each with a 1 s
// deadline (calls reaching the bottom per user request, the user's time to fail);
// then a sustained outage, healthy requests at a steady rate after which the bottom
// goes down and as many requests follow at the same rate (the retries reaching the
// bottom as a share of the traffic).
//
// It talks to 127.0.0.1 only, and every run is bounded in requests (-requests,
// -warmup, -outage), rate (-rate) and deadline (-deadline): with the defaults the
// whole run takes about 40 s.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/deadlinekit/deadlinekit/bench/retrycmp"
)

func main() {
	requests := flag.Int("requests", 10, "user requests per variant, one after the other, in the outage")
	deadline := flag.Duration("deadline", time.Second, "deadline of each user request")
	warmup := flag.Int("warmup", 200, "healthy user requests before the sustained outage (0: skip the sustained run)")
	outage := flag.Int("outage", 200, "user requests during the sustained outage (0: skip the sustained run)")
	rate := flag.Float64("rate", 100, "user requests per second in the sustained run")
	only := flag.String("only", "", "run only the variants whose name contains this")
	flag.Parse()
	if *requests < 0 || *requests > 100 || *warmup < 0 || *warmup > 10000 || *outage < 0 || *outage > 10000 ||
		!(*rate >= 1 && *rate <= 1000) || *deadline <= 0 || *deadline > 10*time.Second {
		fmt.Fprintln(os.Stderr, "retrybench: -requests must be in 0..100, -warmup and -outage in 0..10000, -rate in 1..1000, -deadline in (0, 10s]")
		os.Exit(2)
	}

	fmt.Printf("Command: `%s`\n\n", strings.Join(append([]string{"cd bench && go run ./cmd/retrybench"}, os.Args[1:]...), " "))
	fmt.Printf("3-layer gRPC chain on 127.0.0.1 (user → L1 → L2 → bottom), bottom answers UNAVAILABLE; %d attempts per layer; %s\n\n", retrycmp.Attempts, time.Now().UTC().Format(time.RFC3339))

	var variants []retrycmp.Variant
	for _, v := range retrycmp.Variants() {
		if *only == "" || strings.Contains(v.Name, *only) {
			variants = append(variants, v)
		}
	}

	if *requests > 0 {
		fmt.Printf("### Outage: %d user requests one after the other, deadline %v each\n\n", *requests, *deadline)
		fmt.Println("| variant | calls reaching the bottom per user request | fewest–most for one request | time to fail p50 | time to fail max | the user sees |")
		fmt.Println("| --- | ---: | ---: | ---: | ---: | --- |")
		for _, v := range variants {
			if v.SustainedOnly {
				continue
			}
			fmt.Fprintf(os.Stderr, "running %s (%d requests)...\n", v.Name, *requests)
			r, err := retrycmp.RunOutage(v, *requests, *deadline)
			if err != nil {
				fmt.Fprintln(os.Stderr, "retrybench:", err)
				continue
			}
			fmt.Printf("| %s | %.1f | %d–%d | %s | %s | %s |\n", r.Variant, r.PerRequest(), r.MinCalls, r.MaxCalls, ms(r.P50), ms(r.Max), retrycmp.FormatCodes(r.Codes))
		}
		fmt.Println()
	}

	if *warmup > 0 && *outage > 0 {
		cfg := retrycmp.SustainedConfig{Warmup: *warmup, Outage: *outage, Rate: *rate, Deadline: *deadline}
		fmt.Printf("### Sustained outage: %d healthy user requests, then %d with the bottom down, %.0f per second, deadline %v each\n\n", cfg.Warmup, cfg.Outage, cfg.Rate, cfg.Deadline)
		fmt.Println("Retries: calls reaching the bottom beyond the first of each user request. Share of traffic: retries / all user requests (healthy and outage, all within one 10 s budget window).")
		fmt.Println()
		fmt.Println("| variant | calls reaching the bottom | retries | retries / outage requests | retries / all traffic | budget bound | time to fail p50 | time to fail max | the user sees |")
		fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
		for _, v := range variants {
			fmt.Fprintf(os.Stderr, "running %s (sustained, %d + %d requests)...\n", v.Name, cfg.Warmup, cfg.Outage)
			r, err := retrycmp.RunSustained(v, cfg)
			if err != nil {
				fmt.Fprintln(os.Stderr, "retrybench:", err)
				continue
			}
			bound := "none"
			if r.Bound >= 0 {
				bound = fmt.Sprint(r.Bound)
			}
			seen := retrycmp.FormatCodes(r.Codes)
			if r.WarmupErrors > 0 {
				seen += fmt.Sprintf(" (%d healthy requests failed)", r.WarmupErrors)
			}
			fmt.Printf("| %s | %d | %d | %.1f%% | %.1f%% | %s | %s | %s | %s |\n", r.Variant, r.BottomCalls, r.Retries(),
				100*r.ShareOfOutage(), 100*r.ShareOfTraffic(), bound, ms(r.P50), ms(r.Max), seen)
		}
		fmt.Println()
		fmt.Println("Budget bound (deadlinekit): 10% × the healthy requests (the successes of L2's client) + floor × 10 s, the most retries one client's budget allows within its 10 s window; L1 and the user's client do not retry (L2 answers with grpc-retry-pushback-ms: -1).")
		fmt.Println()
	}

	fmt.Println("Variants:")
	for _, v := range variants {
		fmt.Println("- " + v.Name + ": " + v.Note)
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
