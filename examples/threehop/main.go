// Command threehop runs a three-service chain on loopback and shows, scenario by
// scenario, what deadlinekit changes: client → A (HTTP) → B (gRPC) → C (HTTP).
//
//	go run ./examples/threehop                       # every scenario, one readings table
//	go run ./examples/threehop -scenario wasted -v   # one scenario, a line per hop
//	go run ./examples/threehop -otlp 127.0.0.1:4317  # also export traces (e.g. to Jaeger)
//
// Scenarios:
//
//	wasted   100 ms of work per hop under a 250 ms client budget. Without the toolkit
//	         every hop sets its own 300 ms timeout and C keeps working after the client
//	         gave up; with the deadline propagated (package propagate) C is cancelled
//	         at the client's deadline. A waterfall shows both runs on one time axis.
//	shortcircuit
//	         A and B leave C a few ms of a 250 ms budget for 20 ms of work that does
//	         not watch its context. Without a guard C does the work for nobody; with
//	         package shortcircuit (floor 20 ms) C refuses in microseconds.
//	retry    C is down. Without the toolkit each layer retries 3 times: 27 calls
//	         reach C per user request. With package retry on every layer, B retries
//	         C with backoff under its budget, then tells A not to retry
//	         (grpc-retry-pushback-ms: -1): 3 calls.
//	hedge    C's latency has a heavy tail (0.5% of answers take ~500 ms). B calls C,
//	         16 at once, plainly and through package hedge, which sends a second copy
//	         once a call has taken longer than C's observed P99: p50, p99, p99.9 and
//	         the extra load on C.
//	breaker  B calls C every 10 ms (250 ms budget each), and C hangs for 3 s, then comes
//	         back. B's client is deadlinekit.NewTransport, without and with its breaker
//	         (first sleep 1 s here, to keep the demo short): the calls reaching C
//	         while it hangs, B's time to fail a call (a timeout, or microseconds once
//	         the circuit is open), and the time from C's recovery to B's first success
//	         and to the circuit closing. A timeline shows both runs.
//	overload C has 4 slots × 10 ms of work that does not watch its context (400
//	         requests/s); B offers it twice that for 2 s (Poisson arrivals, 100 ms
//	         budget each). Without a guard every request waits in a growing line and C
//	         works for callers long gone; with a concurrency limit of 4
//	         (shortcircuit.WithMaxConcurrency) C admits what it can finish in time and
//	         refuses the rest at once: answers in time, wasted work, C's p99.
//	lost     "The answer was lost": the client POSTs a payment, B charges it in C's
//	         ledger, and B's answer to A is cut once after B ran. A retries with the
//	         same idempotency key. Without dedup B runs twice (a double charge); with
//	         deadlinekit.WithDedup on B it runs once and the retry gets B's stored
//	         answer. THREEHOP_REDIS=host:port keeps B's keys in that Redis.
//
// The readings come from the services themselves: each hop records when it received
// the request, with what budget, and when its work ended; the client records when it
// gave up. Nothing is computed from the scenario's parameters.
//
// With -otlp ADDR (or OTEL_EXPORTER_OTLP_ENDPOINT), each service exports its spans
// over OTLP/gRPC under its own service name (threehop-client, threehop-a, threehop-b,
// threehop-c), and the demo prints the trace ID of each scenario's representative
// request, to open in Jaeger.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/deadlinekit/deadlinekit/propagate"
)

func main() {
	scenario := flag.String("scenario", "", "run one scenario: "+strings.Join(scenarioNames(), ", ")+" (default: all)")
	otlp := flag.String("otlp", "", "export traces over OTLP/gRPC to this host:port (default: OTEL_EXPORTER_OTLP_ENDPOINT, else off)")
	verbose := flag.Bool("v", false, "print a line per hop and per request as they happen")
	flag.Parse()
	if err := run(os.Stdout, options{scenario: *scenario, otlp: *otlp, verbose: *verbose}); err != nil {
		fmt.Fprintln(os.Stderr, "threehop:", err)
		os.Exit(1)
	}
}

type options struct {
	scenario string
	otlp     string
	verbose  bool
}

// A reading is one line of the table: what was measured, without and with the toolkit.
type reading struct {
	scenario, measure, without, with string
}

type scenario struct {
	name string
	run  func(*env) ([]reading, error)
}

var scenarios = []scenario{
	{"wasted", runWasted},
	{"shortcircuit", runShortCircuit},
	{"retry", runRetry},
	{"hedge", runHedge},
	{"breaker", runBreaker},
	{"overload", runOverload},
	{"lost", runLost},
}

func scenarioNames() []string {
	var names []string
	for _, s := range scenarios {
		names = append(names, s.name)
	}
	return names
}

// env is what a scenario runs with.
type env struct {
	tel     *telemetry
	out     io.Writer // the scenario's own output (waterfalls)
	verbose io.Writer // per-hop lines, io.Discard unless -v
	mu      sync.Mutex
	traces  []string // "label trace-id" lines, printed at the end when exporting
}

// trace notes the trace of a representative request, for the user to open in Jaeger.
// It may be called from several goroutines.
func (e *env) trace(label string, span trace.Span) {
	if sc := span.SpanContext(); sc.IsValid() {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.traces = append(e.traces, fmt.Sprintf("trace %s  %s", sc.TraceID(), label))
	}
}

func run(w io.Writer, o options) error {
	var chosen []scenario
	for _, s := range scenarios {
		if o.scenario == "" || o.scenario == s.name {
			chosen = append(chosen, s)
		}
	}
	if len(chosen) == 0 {
		return fmt.Errorf("unknown scenario %q (want one of %s)", o.scenario, strings.Join(scenarioNames(), ", "))
	}
	ctx := context.Background()
	tel, err := newTelemetry(ctx, o.otlp)
	if err != nil {
		return err
	}
	e := &env{tel: tel, out: w, verbose: io.Discard}
	if o.verbose {
		e.verbose = w
	}
	fmt.Fprintln(w, "deadlinekit three-hop demo: client → A (HTTP) → B (gRPC) → C (HTTP), all on 127.0.0.1")
	var readings []reading
	for _, s := range chosen {
		rs, err := s.run(e)
		if err != nil {
			return fmt.Errorf("scenario %s: %w", s.name, err)
		}
		readings = append(readings, rs...)
	}
	fmt.Fprintln(w)
	printTable(w, readings)
	if tel.enabled() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := tel.shutdown(sctx); err != nil {
			return fmt.Errorf("flushing traces: %w", err)
		}
		fmt.Fprintln(w, "\nTraces exported (services threehop-client, threehop-a, threehop-b, threehop-c):")
		for _, t := range e.traces {
			fmt.Fprintln(w, "  "+t)
		}
	}
	return nil
}

func printTable(w io.Writer, readings []reading) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tmeasured\twithout\twith deadlinekit")
	for _, r := range readings {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.scenario, r.measure, r.without, r.with)
	}
	tw.Flush()
}

// clientSaw says what a caller saw of its call, in words for a root span's name:
// "got 504", "gave up at its deadline". A root span is named after it once the call
// is over, so that the name says what happened in that trace.
func clientSaw(err error) string {
	switch {
	case err == nil:
		return "got its answer"
	case statusOf(err) != 0:
		return fmt.Sprintf("got %d", statusOf(err))
	case errors.Is(err, context.DeadlineExceeded):
		return "gave up at its deadline"
	case errors.Is(err, context.Canceled):
		return "cancelled its call"
	default:
		return "failed to connect"
	}
}

// propagateTransport puts propagate's transport on an outbound HTTP edge.
func propagateTransport(rt http.RoundTripper) http.RoundTripper { return propagate.NewTransport(rt) }

// ms formats a duration in whole milliseconds.
func ms(d time.Duration) string {
	return fmt.Sprintf("%d ms", d.Round(time.Millisecond)/time.Millisecond)
}

// msPrecise formats a duration in milliseconds with one decimal.
func msPrecise(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
