package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestDemo runs the demo as a user would and checks what it reports: without the
// toolkit C finishes its work long after the client gave up; with the deadline
// propagated C is cancelled.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, "", true); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	lines := strings.Split(out.String(), "\n")
	var independent, propagated string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "own 300 ms timeout per hop"):
			independent = l
		case strings.HasPrefix(l, "deadline propagated"):
			propagated = l
		}
	}
	if independent == "" || propagated == "" {
		t.Fatalf("readings table lacks a scenario row:\n%s", out.String())
	}
	if strings.Contains(independent, "cancelled") {
		t.Errorf("independent timeouts: a hop was cancelled, want every hop to run to the end: %q", independent)
	}
	if !strings.Contains(propagated, "cancelled at") {
		t.Errorf("propagated deadline: C was not cancelled: %q", propagated)
	}
	if err := run(&out, "nonsense", false); err == nil {
		t.Error("an unknown scenario was accepted")
	}
}

func TestScenarioResults(t *testing.T) {
	ind, err := runChain(modeIndependent, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	prop, err := runChain(modePropagated, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("C's work after the client gave up: independent %v, propagated %v", ind.wasted, prop.wasted)
	if ind.hops[2].cancelled || !prop.hops[2].cancelled {
		t.Fatalf("C cancelled: independent %v, propagated %v; want false, true", ind.hops[2].cancelled, prop.hops[2].cancelled)
	}
	if ind.wasted <= prop.wasted {
		t.Fatalf("wasted work independent %v <= propagated %v", ind.wasted, prop.wasted)
	}
	// With the deadline propagated every hop's budget is less than the one before.
	for i := 1; i < 3; i++ {
		if prop.hops[i].budget >= prop.hops[i-1].budget {
			t.Errorf("hop %d received %v, not less than hop %d's %v", i, prop.hops[i].budget, i-1, prop.hops[i-1].budget)
		}
	}
}
