package admissioncmp_test

import (
	"math"
	"regexp"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit/bench/admissioncmp"
)

// resultLine is the format scripts read: one line per cell and variant.
var resultLine = regexp.MustCompile(`^RESULT cell=\S+ variant=\S+ critical_goodput=[01]\.\d{4} total_goodput=\d+\.\d{4} critical_p99_ms=\d+\.\d{2} refusal_work=[01]\.\d{4}$`)

func TestChainResultLineFormat(t *testing.T) {
	r := admissioncmp.ChainResult{Cell: "10x-cost", Variant: "dk-crit-adaptive",
		Med: admissioncmp.ChainFig{CriticalGoodput: 0.995, TotalGoodput: 0.93, CriticalP99: 41500 * time.Microsecond, RefusalWork: 0.08}}
	got := r.ResultLine()
	want := "RESULT cell=10x-cost variant=dk-crit-adaptive critical_goodput=0.9950 total_goodput=0.9300 critical_p99_ms=41.50 refusal_work=0.0800"
	if got != want || !resultLine.MatchString(got) {
		t.Fatalf("ResultLine() = %q, want %q", got, want)
	}
}

// A tiny cell of the chain runs with every variant: the client sends what the
// cell offers (all of it critical here), the counts add up, every variant answers,
// and the RESULT line reads. The budgets are long: a loaded machine, or the race
// detector, slows the three hops down.
func TestChainTinyCell(t *testing.T) {
	cfg := admissioncmp.ChainConfig{Name: "tiny", Workers: 4, Work: 5 * time.Millisecond, Load: 0.1, Critical: 0.1,
		MinBudget: time.Second, MaxBudget: 2 * time.Second, RefusalCost: 0.1,
		Warmup: 50 * time.Millisecond, Duration: 300 * time.Millisecond, Rounds: 1, Seed: 1, MaxInFlight: 1000}
	rs, err := admissioncmp.RunChain(admissioncmp.ChainVariants(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(admissioncmp.ChainVariants()) {
		t.Fatalf("%d results for %d variants", len(rs), len(admissioncmp.ChainVariants()))
	}
	const capacity = 800 // 4 slots × 5 ms
	const offered = 24   // a tenth of it for 0.3 s
	for _, r := range rs {
		line := r.ResultLine()
		if !resultLine.MatchString(line) {
			t.Errorf("%s: bad RESULT line %q", r.Variant, line)
		}
		f := r.Med
		if f.Sent+f.Dropped < offered-1 || f.Sent+f.Dropped > offered+1 || f.Critical != f.Sent || f.CriticalOK != f.OK ||
			f.OK == 0 || f.OK > f.Sent || math.Abs(f.TotalGoodput-float64(f.OK)/(capacity*0.3)) > 1e-9 {
			t.Errorf("%s: %+v; lost %v", r.Variant, f, r.Lost)
		}
	}
}
