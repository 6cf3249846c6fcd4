package breaker

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// Observers see every change of state, in the order given; a panic of theirs goes
// through to the caller whose call made the change.
func TestObservers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var first, second []Event
		b := fixed(WithConsecutiveFailures(3), WithOpenFor(time.Second), WithProbes(1),
			WithObserver(func(_ context.Context, e Event) { first = append(first, e) }),
			WithObserver(func(_ context.Context, e Event) { second = append(second, e) }))
		calls(t, b, "t", 3, 3)
		time.Sleep(2 * time.Second)
		calls(t, b, "t", 1, 0) // the probe: half-open, then closed
		want := []Event{{"t", Closed, Open}, {"t", Open, HalfOpen}, {"t", HalfOpen, Closed}}
		if len(first) != len(want) || len(second) != len(want) {
			t.Fatalf("observers saw %v and %v; want %v", first, second, want)
		}
		for i := range want {
			if first[i] != want[i] || second[i] != want[i] {
				t.Errorf("event %d: %v and %v; want %v", i, first[i], second[i], want[i])
			}
		}

		b = fixed(WithConsecutiveFailures(1), WithObserver(func(context.Context, Event) { panic("observer") }))
		defer func() {
			if r := recover(); r != "observer" {
				t.Errorf("recovered %v; want the observer's panic", r)
			}
		}()
		_ = do(b, "t", time.Millisecond, errFail)
		t.Error("the observer's panic did not reach the caller")
	})
}
