// Command dedupbench runs package dedup's exactly-once harness (bench/dedupcmp):
// logical requests sent 1–3 times at once through deadlinekit.NewTransport, a share
// of the answers lost after the server ran them, two replicas on one Redis (a real
// redis-server it starts), one replica killed and Redis restarted mid-run; it
// prints the executions per answered key, the keys never answered and the repeats
// answered after their own deadline, with dedup and without.
//
//	go run ./cmd/dedupbench            # from bench/
//	go run ./cmd/dedupbench -n 2000
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"

	"github.com/deadlinekit/deadlinekit/bench/dedupcmp"
)

func main() {
	cfg := dedupcmp.DefaultFaults
	flag.IntVar(&cfg.Requests, "n", cfg.Requests, "logical requests")
	flag.IntVar(&cfg.Concurrency, "c", cfg.Concurrency, "logical requests in flight at once")
	flag.Float64Var(&cfg.LossRatio, "loss", cfg.LossRatio, "share of answers lost after the server ran them")
	flag.Parse()
	fmt.Printf("%d logical requests, each sent 1–3 times at once, %d in flight, budget %v, %.0f%% of answers lost, 2 replicas on one Redis: replica 2 killed at request %d, Redis restarted at request %d\n\n",
		cfg.Requests, cfg.Concurrency, cfg.Deadline, 100*cfg.LossRatio, cfg.Requests/3, 2*cfg.Requests/3)
	fmt.Println("variant                     copies  lost answers  answered  never answered  executions per answered key             repeats answered past their deadline  took")
	for _, v := range []struct {
		name              string
		noDedup, volatile bool
	}{
		{"without dedup", true, false},
		{"with dedup, Redis with AOF", false, false},
		{"with dedup, Redis volatile", false, true},
	} {
		c := cfg
		c.NoDedup, c.Volatile = v.noDedup, v.volatile
		r, err := dedupcmp.RunFaults(c)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		name := v.name
		fmt.Printf("%-27s %6d  %12d  %8d  %14d  %-38s  %36d  %v\n", name, r.Copies, r.Lost, r.Answered, r.NeverAnswered, histogram(r.Executions), r.WaitedPastDeadline, r.Took.Round(1e7))
	}
}

func histogram(m map[int]int) string {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	s := ""
	for _, k := range ks {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%d×: %d", k, m[k])
	}
	return s
}
