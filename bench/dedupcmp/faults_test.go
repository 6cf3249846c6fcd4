package dedupcmp_test

import (
	"os/exec"
	"testing"

	"github.com/deadlinekit/deadlinekit/bench/dedupcmp"
)

// TestFaultHarness runs the harness briefly: the figures come from cmd/dedupbench.
func TestFaultHarness(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server not found: install it (apt-get install redis-server; .ci/run does) to run the harness")
	}
	cfg := dedupcmp.DefaultFaults
	cfg.Requests = 300
	for _, c := range []struct{ kill, restart bool }{{false, false}, {true, false}, {false, true}} {
		cfg.NoKill, cfg.NoRestart = !c.kill, !c.restart
		r, err := dedupcmp.RunFaults(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("kill %v restart %v: %+v", c.kill, c.restart, r)
	}
	r, err := dedupcmp.RunFaults(dedupcmp.FaultConfig{Requests: 300, Concurrency: 64, Deadline: cfg.Deadline, LossRatio: 0.1, Work: cfg.Work, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Answered == 0 || r.Lost == 0 {
		t.Fatalf("the harness did not run: %+v", r)
	}
}
