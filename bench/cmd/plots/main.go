// Command plots draws the figures that BENCHMARKS.md shows, from the harnesses'
// machine-readable output:
//
//	cd bench && go run ./cmd/plots -run all   # run the harnesses briefly (about 12 minutes), then draw
//	cd bench && go run ./cmd/plots -run knee  # run one of them again (hedge, load, knee), then draw
//	cd bench && go run ./cmd/plots            # draw again from the data kept in plots/data
//
// -run runs, through `go run`, hedgebench (-csv: every call's latency),
// admissionbench's load sweep and its shared saturation cell whose knee falls from
// 8 to 4 (-json: every cell's results, with the requests in the handler every
// 10 ms), keeping their data and their markdown tables in plots/data. Then it
// writes:
//
//   - plots/hedge-latency.png: the share of calls slower than each latency, with
//     and without hedging (a log-log survival curve: the tail is the right end);
//   - plots/admission-goodput.png: goodput against offered load for the admission
//     variants, handler work that stops with its context and work that ignores it;
//   - plots/adaptive-knee.png: the requests the adaptive limit lets into the
//     handler, against the saturation backend's knee as it falls, beside a static
//     limit and failsafe-go's adaptive limiter.
//
// The runs are short (seconds per variant and round, five rounds), and the
// admission plots show each variant's least stalled round (the process's
// scheduling latency, p99.9): on a busy machine a stalled round measures the
// machine. The images show shapes; BENCHMARKS.md's tables hold longer runs.
package main

import (
	"compress/gzip"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	dir := flag.String("dir", "plots", "where the images go; the data is read from (and with -run written to) its data folder")
	run := flag.String("run", "", "run these harnesses first, comma-separated: hedge (about 20 s), load (about 9 minutes), knee (about 3 minutes), or all; loopback only")
	flag.Parse()
	data := filepath.Join(*dir, "data")
	want := map[string]bool{}
	for _, f := range strings.Split(*run, ",") {
		if f = strings.TrimSpace(f); f == "all" {
			want["hedge"], want["load"], want["knee"] = true, true, true
		} else if f != "" {
			want[f] = true
		}
	}
	for _, f := range figures(data) {
		if want[f.name] {
			if err := runHarness(data, f); err != nil {
				fmt.Fprintln(os.Stderr, "plots:", err)
				os.Exit(1)
			}
			delete(want, f.name)
		}
	}
	if len(want) > 0 {
		fmt.Fprintln(os.Stderr, "plots: -run takes hedge, load, knee or all")
		os.Exit(2)
	}
	for _, f := range figures(data) {
		note := ""
		if b, err := os.ReadFile(filepath.Join(data, f.name+".note")); err == nil {
			note = strings.TrimSpace(string(b))
		}
		out := filepath.Join(*dir, f.out)
		if err := f.draw(filepath.Join(data, f.in), out, note); err != nil {
			fmt.Fprintln(os.Stderr, "plots:", err)
			os.Exit(1)
		}
		fmt.Println("wrote", out)
	}
}

// The variants drawn in the admission plots (admissionbench -only; a part ending
// in $ must end the name).
const (
	loadVariants = "no guard|static floor|static limit 8$|shortcircuit, adaptive limit$|adaptivelimiter, defaults|Vegas"
	kneeVariants = "shortcircuit, adaptive limit$|adaptivelimiter, defaults|Vegas"
)

// figure is one image: the harness run that feeds it (its markdown tables kept
// beside its data) and how it is drawn.
type figure struct {
	name, in, out string
	args          []string // go run …
	draw          func(in, out, note string) error
}

func figures(data string) []figure {
	return []figure{
		{"hedge", "hedge.csv.gz", "hedge-latency.png",
			[]string{"./cmd/hedgebench", "-calls", "4000", "-shift-calls", "0", "-csv", filepath.Join(data, "hedge.csv")}, drawHedge},
		{"load", "admission-load.json", "admission-goodput.png",
			[]string{"./cmd/admissionbench", "-loads", "0.5,1,2,4", "-queue-loads", "", "-warmup", "800ms", "-duration", "1s", "-rounds", "5",
				"-only", loadVariants, "-json", filepath.Join(data, "admission-load.json")}, drawGoodput},
		{"knee", "admission-knee.json", "adaptive-knee.png",
			[]string{"./cmd/admissionbench", "-cells", "slowdown", "-cell", "shared saturation, knee 8 → 4", "-rounds", "5",
				"-duration", "5s", "-only", kneeVariants, "-json", filepath.Join(data, "admission-knee.json")}, drawKnee},
	}
}

// runHarness runs f's harness and keeps its output in data: the data file, its
// markdown tables (name.md) and when and how loaded the machine was (name.note).
func runHarness(data string, f figure) error {
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	note := fmt.Sprintf("run %s, load average %s at the start", time.Now().UTC().Format("2006-01-02 15:04 MST"), loadavg())
	fmt.Fprintln(os.Stderr, "plots: go run", strings.Join(f.args, " "))
	out, err := os.Create(filepath.Join(data, f.name+".md"))
	if err != nil {
		return err
	}
	cmd := exec.Command("go", append([]string{"run"}, f.args...)...)
	cmd.Stdout, cmd.Stderr = out, os.Stderr
	err = cmd.Run()
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", f.args[0], err)
	}
	// Every call's latency is kept compressed: a plain CSV is most of a megabyte.
	if f.name == "hedge" {
		if err := gzipFile(filepath.Join(data, "hedge.csv")); err != nil {
			return err
		}
	}
	note += fmt.Sprintf(", %s at the end (2 cores shared with other work)", loadavg())
	return os.WriteFile(filepath.Join(data, f.name+".note"), []byte(note+"\n"), 0o644)
}

// gzipFile replaces path by path.gz.
func gzipFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	f, err := os.Create(path + ".gz")
	if err != nil {
		return err
	}
	zw := gzip.NewWriter(f)
	_, err = zw.Write(b)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Remove(path)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return f[0]
	}
	return "unknown"
}
