package breaker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

// While a circuit is open, the refused calls that can wait for its next probes are
// told to come back for them (the pushback is the time until them) only as many
// per opening as it has probes; later ones are told the probes are taken (pushback
// -1) and say so. A call whose deadline comes before the probe's answer (the
// target's typical latency after it) is told the time, and takes no promise. A new
// opening (failed probes) promises its probes afresh.
func TestAnOpenCircuitPromisesItsProbesOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := fixed(WithProbes(2), WithMinCalls(typicalMinSamples+DefaultMinCalls))
		for range typicalMinSamples { // the target answers in 100 ms
			if err := do(b, "a", 100*time.Millisecond, nil); err != nil {
				t.Fatal(err)
			}
		}
		calls(t, b, "a", DefaultMinCalls, DefaultMinCalls)
		wantState(t, b, "a", Open)
		refusal := func(budget time.Duration) *OpenError {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			var oe *OpenError
			if !errors.As(doCtx(ctx, b, "a", 0, nil), &oe) {
				t.Fatal("not refused")
			}
			return oe
		}
		pb := func(oe *OpenError) string {
			v, _ := pushback.Of(oe.carried())
			return v
		}
		// Too short to wait for the probe (5 s away), or for its answer: told the
		// time, no promise.
		if oe := refusal(time.Second); pb(oe) != "5000" || oe.PushbackMs() != "5000" {
			t.Fatalf("a call that cannot wait: pushback %q, want 5000", pb(oe))
		}
		if oe := refusal(5*time.Second + 50*time.Millisecond); pb(oe) != "5000" {
			t.Fatalf("a call with no time for the probe's answer: pushback %q, want 5000", pb(oe))
		}
		for i := range 2 {
			if oe := refusal(10 * time.Second); pb(oe) != "5000" || strings.Contains(oe.Error(), "promised") {
				t.Fatalf("call %d that can wait: pushback %q (%v), want 5000", i+1, pb(oe), oe)
			}
		}
		oe := refusal(10 * time.Second)
		if pb(oe) != pushback.DoNotRetry || oe.PushbackMs() != pushback.DoNotRetry || oe.RetryAfter != DefaultSleep.First ||
			!strings.Contains(oe.Error(), "promised to earlier calls") {
			t.Fatalf("the third call that can wait: pushback %q, %v; want -1, the time kept, and the reason", pb(oe), oe)
		}
		if oe := refusal(time.Second); pb(oe) != "5000" {
			t.Fatalf("a call that cannot wait, after the promises: pushback %q, want the time", pb(oe))
		}

		// The probes fail: the circuit opens again, its next probes promised afresh.
		time.Sleep(DefaultSleep.First)
		if err := do(b, "a", time.Millisecond, errFail); err != nil {
			t.Fatalf("the probe was refused: %v", err)
		}
		wantState(t, b, "a", Open)
		if oe := refusal(time.Minute); pb(oe) == pushback.DoNotRetry {
			t.Fatalf("after a new opening: %v, want a promise", oe)
		}
	})
}
