package main

import (
	"io"
	"testing"
)

// TestLost checks what C recorded: two charges per payment without dedup on B, one
// with it, and the client gets the first execution's answer.
func TestLost(t *testing.T) {
	e := &env{tel: &telemetry{}, out: io.Discard, verbose: io.Discard}
	without, err := runLostOnce(e, false)
	if err != nil {
		t.Fatal(err)
	}
	with, err := runLostOnce(e, true)
	if err != nil {
		t.Fatal(err)
	}
	if without.charges != 2*lostPayments || without.first != "200 charge 2" {
		t.Errorf("without dedup: %d charges, first payment %q; want %d and the second execution's answer", without.charges, without.first, 2*lostPayments)
	}
	if with.charges != lostPayments || with.first != "200 charge 1" {
		t.Errorf("with dedup: %d charges, first payment %q; want %d and the first execution's answer", with.charges, with.first, lostPayments)
	}
}
