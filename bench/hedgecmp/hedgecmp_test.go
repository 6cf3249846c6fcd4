package hedgecmp_test

import (
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit/bench/hedgecmp"
)

// TestHarness runs every variant briefly on a faster tail: the harness works, talks
// to loopback only, and counts backend requests. The figures come from
// cmd/hedgebench, not from here.
func TestHarness(t *testing.T) {
	tail := hedgecmp.Tail{Fast: time.Millisecond, Mid: 10 * time.Millisecond, Slow: 100 * time.Millisecond, PMid: 0.015, PSlow: 0.005, Jitter: 0.2}
	b, err := hedgecmp.NewBackend(tail, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg := hedgecmp.Config{Calls: 400, Concurrency: 8, CallTimeout: 5 * time.Second, MaxTime: 20 * time.Second, ShiftAt: 300}
	var p99 time.Duration
	for i, v := range hedgecmp.Variants() {
		rt, _, err := v.Build(hedgecmp.NewBaseTransport(cfg.Concurrency), p99)
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		r := hedgecmp.Run(v.Name, rt, b, cfg)
		if i == 0 {
			p99 = r.P99
		}
		t.Logf("%s: p50 %v p99 %v max %v, extra load %.1f%% (after the shift %.1f%%)", r.Variant, r.P50, r.P99, r.Max, 100*r.ExtraLoad(), 100*r.ExtraLoadAfter())
		if r.Calls != cfg.Calls || r.Errors != 0 || r.Requests < int64(r.Calls) || r.CallsAfter != cfg.Calls-cfg.ShiftAt {
			t.Errorf("%s: %+v", v.Name, r)
		}
		if v.Name == "deadlinekit/hedge" && r.ExtraLoad() > 0.15+float64(10)/float64(cfg.Calls) {
			t.Errorf("%s: extra load %.3f above the cap", v.Name, r.ExtraLoad())
		}
	}
}

// TestSweepVariants runs every sweep variant briefly on a fast lognormal-Pareto tail:
// each is measured, its oracle delays come from the distribution, and deadlinekit's
// delay is traced.
func TestSweepVariants(t *testing.T) {
	d := hedgecmp.LogPareto{Median: time.Millisecond, Sigma: 0.25, PTail: 0.03, Scale: 2 * time.Millisecond, Alpha: 1.1, Cap: 100 * time.Millisecond}
	q := hedgecmp.TrueQuantiles(d, 0.95, 0.99)
	if !(q[0] > 0 && q[0] < q[1] && q[1] <= d.Cap) {
		t.Fatalf("true quantiles %v", q)
	}
	cfg := hedgecmp.Config{Calls: 300, Concurrency: 8, CallTimeout: 5 * time.Second, MaxTime: 20 * time.Second}
	for _, v := range hedgecmp.SweepVariants() {
		r, err := hedgecmp.RunOne(v, d, hedgecmp.Oracle{P95: q[0], P99: q[1]}, 1, cfg)
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		if r.Result.Calls != cfg.Calls || r.Result.Errors != 0 || r.Result.Requests < int64(cfg.Calls) {
			t.Errorf("%s: %+v", v.Name, r.Result)
		}
		t.Logf("%s: p99.9 %v, extra load %.1f%%, %d delay readings", v.Name, r.Result.P999, 100*r.Result.ExtraLoad(), len(r.Trace))
	}
}
