package breakercmp_test

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/deadlinekit/deadlinekit/bench/breakercmp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The harness tests run every variant briefly, side by side: the scenarios produce
// the outage, the cancellations and the starved budgets they claim, and deadlinekit's
// breaker opens in the outage and never on the healthy downstream. The figures come
// from cmd/breakerbench, not from here.

func isOurs(name string) bool { return strings.HasPrefix(name, "deadlinekit") }

func TestOutageHarness(t *testing.T) {
	cfg := breakercmp.OutageConfig{Rate: 200, Budget: time.Second, Delay: 5 * time.Millisecond,
		Warmup: 200 * time.Millisecond, Outage: time.Second}
	if !testing.Short() {
		cfg.Outage = 2 * time.Second
	}
	rs, err := breakercmp.RunOutage(breakercmp.Variants(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := int(cfg.Rate * cfg.Outage.Seconds())
	for _, r := range rs {
		t.Logf("%+v", r)
		if r.WarmupErrors != 0 {
			t.Errorf("%s: %d healthy requests failed before the outage", r.Variant, r.WarmupErrors)
		}
		if r.Requests < want*9/10 || r.Requests > want+2 {
			t.Errorf("%s: %d requests in the outage, want about %d", r.Variant, r.Requests, want)
		}
		if r.OutageOK > 2 {
			t.Errorf("%s: %d outage requests answered 200", r.Variant, r.OutageOK)
		}
		if r.DownCalls == 0 || r.DownCalls+r.Refused < r.Requests-2 || r.DownCalls > r.Requests+2 {
			t.Errorf("%s: %d calls reached the dead downstream, %d refused, of %d", r.Variant, r.DownCalls, r.Refused, r.Requests)
		}
		if r.TimeToOpen < 0 || r.Opens == 0 || r.Refused == 0 {
			t.Errorf("%s: did not open in the outage: %+v", r.Variant, r)
		}
	}
}

func TestNeutralHarness(t *testing.T) {
	for _, kind := range []breakercmp.Neutral{breakercmp.Cancel, breakercmp.Starved} {
		cfg := breakercmp.NeutralConfig{Kind: kind, Rate: 200, Share: 0.3, Budget: time.Second,
			Delay: 20 * time.Millisecond, CancelAfter: 5 * time.Millisecond, StarvedBudget: 5 * time.Millisecond,
			Warmup: 300 * time.Millisecond, Duration: time.Second, Seed: 1}
		if !testing.Short() {
			cfg.Duration = 2 * time.Second
		}
		rs, err := breakercmp.RunNeutral(breakercmp.Variants(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			t.Logf("%s: %+v", kind, r)
			share := float64(r.Planned) / float64(r.Scripted)
			if r.Planned == 0 || share < 0.2 || share > 0.4 {
				t.Errorf("%s, %s: %d of %d calls planned", kind, r.Variant, r.Planned, r.Scripted)
			}
			if r.Median <= cfg.StarvedBudget || r.Median < cfg.Delay {
				t.Errorf("%s, %s: median latency %v", kind, r.Variant, r.Median)
			}
			if r.Opens > 0 {
				// A peer's breaker refused calls: those calls are neither as planned nor answered.
				if isOurs(r.Variant) {
					t.Errorf("%s, %s: opened %d times on a healthy downstream: %+v", kind, r.Variant, r.Opens, r)
				}
				continue
			}
			// Under -race on a busy machine a cancellation's timer may fire after the answer.
			if r.AsPlanned < r.Planned-r.Planned/20 || r.FairFailed != 0 {
				t.Errorf("%s, %s: %d of %d planned calls as planned, %d fair calls failed", kind, r.Variant, r.AsPlanned, r.Planned, r.FairFailed)
			}
			if isOurs(r.Variant) && (r.Failures != 0 || r.Refused != 0) {
				t.Errorf("%s, %s: %+v", kind, r.Variant, r)
			}
		}
	}
}

// TestClosedPaths runs each closed path briefly: it works around the no-op base, and
// deadlinekit's breaker allocates nothing on it.
func TestClosedPaths(t *testing.T) {
	for _, p := range breakercmp.ClosedPaths() {
		call, done := breakercmp.ClosedCall(p)
		defer done()
		if err := call(); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		allocs := testing.AllocsPerRun(1000, func() { _ = call() })
		t.Logf("%s: %.1f allocs per call", p.Name, allocs)
		if isOurs(p.Name) && !strings.Contains(p.Name, "NewTransport") && allocs != 0 {
			t.Errorf("%s: %.1f allocs per call, want 0", p.Name, allocs)
		}
	}
}

// BenchmarkClosed is the closed path's cost per call of each breaker around a no-op
// RoundTripper, and of deadlinekit's client stack with and without its breaker.
func BenchmarkClosed(b *testing.B) {
	for _, p := range breakercmp.ClosedPaths() {
		b.Run(p.Name, func(b *testing.B) { breakercmp.BenchClosed(b, p) })
	}
}
