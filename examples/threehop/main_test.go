package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestDemo runs the whole demo as a user would and checks the table's rows.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, options{verbose: true}); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	for _, want := range []string{"wasted work", "how C's work ended", "deadline propagated", "short-circuit", "retry amplification", "hedging"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if err := run(io.Discard, options{scenario: "nonsense"}); err == nil {
		t.Error("an unknown scenario was accepted")
	}
}

// TestWasted checks what the services recorded, not the figures' size: without the
// toolkit C runs to the end after the client gave up; with it C is cancelled, and
// every hop's budget is less than the one before.
func TestWasted(t *testing.T) {
	e := &env{tel: &telemetry{}, out: io.Discard, verbose: io.Discard}
	ind, err := runWastedOnce(e, false)
	if err != nil {
		t.Fatal(err)
	}
	prop, err := runWastedOnce(e, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("C's work after the client gave up: independent %v, propagated %v", ind.wasted(), prop.wasted())
	if ind.hops[2].cancelled || !ind.hops[2].reached() {
		t.Fatalf("independent timeouts: C reached %v, cancelled %v; want it to run to the end", ind.hops[2].reached(), ind.hops[2].cancelled)
	}
	// With the deadline propagated, C is cancelled at the deadline; on a machine so
	// loaded that A and B overrun the budget, it is not reached at all. Either way it
	// does not finish its work.
	if c := prop.hops[2]; c.reached() && !c.cancelled {
		t.Fatalf("propagated deadline: C finished its work after the client gave up")
	}
	if ind.wasted() <= prop.wasted() {
		t.Fatalf("wasted work independent %v <= propagated %v", ind.wasted(), prop.wasted())
	}
	for i := 1; i < 3 && prop.hops[i].reached(); i++ {
		if prop.hops[i].budget >= prop.hops[i-1].budget {
			t.Errorf("hop %d received %v, not less than hop %d's %v", i, prop.hops[i].budget, i-1, prop.hops[i-1].budget)
		}
	}
}
