// Command threehop runs a three-service chain on loopback and shows what deadlinekit
// changes: client → A (HTTP) → B (gRPC) → C (HTTP), each hop doing 100 ms of work
// before calling the next, under a client budget of 250 ms.
//
//	go run ./examples/threehop              # every scenario, one readings table
//	go run ./examples/threehop -scenario propagated -v
//
// Scenarios:
//
//	independent  each hop sets its own 300 ms timeout for its work and its call, and
//	             nothing travels downstream (the usual setup). The client gives up at
//	             250 ms, but C goes on until it is done: wasted work.
//	propagated   the deadline travels with the request (package propagate): each hop
//	             works within what the client has left, and C is cancelled at the
//	             client's deadline.
//
// The readings come from the services themselves: each hop records when it received
// the request, with what budget, and when its work ended (finished or cancelled); the
// client records when it gave up. Nothing is computed from the scenario's parameters.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"
)

const (
	hopWork      = 100 * time.Millisecond // each hop's own work
	clientBudget = 250 * time.Millisecond // what the client allows for the whole call
	ownTimeout   = 300 * time.Millisecond // each hop's independent timeout (scenario independent)
)

func main() {
	scenario := flag.String("scenario", "", "run one scenario: independent or propagated (default: all)")
	verbose := flag.Bool("v", false, "print a line per hop as it happens")
	flag.Parse()
	if err := run(os.Stdout, *scenario, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "threehop:", err)
		os.Exit(1)
	}
}

type scenarioSpec struct {
	name, title string
	mode        mode
}

var scenarios = []scenarioSpec{
	{"independent", "own 300 ms timeout per hop", modeIndependent},
	{"propagated", "deadline propagated (deadlinekit)", modePropagated},
}

func run(w io.Writer, only string, verbose bool) error {
	var chosen []scenarioSpec
	for _, s := range scenarios {
		if only == "" || only == s.name {
			chosen = append(chosen, s)
		}
	}
	if len(chosen) == 0 {
		return fmt.Errorf("unknown scenario %q (want independent or propagated)", only)
	}
	fmt.Fprintf(w, "client → A (HTTP) → B (gRPC) → C (HTTP); %v of work per hop; client budget %v\n\n", ms(hopWork), ms(clientBudget))
	var results []result
	for _, s := range chosen {
		var logw io.Writer = io.Discard
		if verbose {
			logw = w
		}
		r, err := runChain(s.mode, logw)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		r.title = s.title
		results = append(results, r)
	}
	printTable(w, results)
	return nil
}

func printTable(w io.Writer, results []result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tA\tB\tC\tC's work after the client gave up")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.title,
			r.hops[0].describe(r.start, r.mode), r.hops[1].describe(r.start, r.mode), r.hops[2].describe(r.start, r.mode),
			msPrecise(r.wasted))
	}
	tw.Flush()
	fmt.Fprintf(w, `
Times are from the client's start; the client gives up at +%s. Each service records
its own readings. With the deadline propagated, what C still does after the client
gave up is the request's transit time: a relative timeout (grpc-timeout) starts again
when each hop reads it, so every hop adds the time the request spent on the way.
`, ms(clientBudget))
}

// ms formats a duration in whole milliseconds.
func ms(d time.Duration) string {
	return fmt.Sprintf("%d ms", d.Round(time.Millisecond)/time.Millisecond)
}

// msPrecise formats a duration in milliseconds with one decimal.
func msPrecise(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
