package breaker

import (
	"context"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc/balancer"
)

// A pick that never reached its endpoint (grpc-go picks again when the picked
// connection was not ready, calling Done with an empty DoneInfo) counts nothing, and
// frees the probe's slot.
func TestNotReadyPickCountsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := halfOpen(t, WithProbes(1))
		c := b.circuit(key{kind: keyCustom, b: "a"})
		before := b.Stats()
		for range 10 {
			st := &streamTicket{}
			if err := b.admit(context.Background(), c, &st.t); err != nil {
				t.Fatalf("probe refused: %v", err)
			}
			var called bool
			b.endpointDone(context.Background(), st, func(balancer.DoneInfo) { called = true })(balancer.DoneInfo{})
			if !called {
				t.Fatal("the round robin's own Done was not called")
			}
		}
		after := b.Stats()
		if after.Successes != before.Successes || after.Failures != before.Failures || after.Neutral != before.Neutral {
			t.Fatalf("not-ready picks counted: %+v, then %+v", before, after)
		}
		// A pick that was sent and failed counts.
		st := &streamTicket{}
		if err := b.admit(context.Background(), c, &st.t); err != nil {
			t.Fatal(err)
		}
		b.endpointDone(context.Background(), st, nil)(balancer.DoneInfo{Err: errFail, BytesSent: true})
		if got := b.State("a"); got != Open {
			t.Fatalf("after a failed probe: %v, want open", got)
		}
	})
}
