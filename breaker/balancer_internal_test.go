package breaker

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

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

type fakeSubConn struct {
	balancer.SubConn
	addr string
}

// rrPicker is round_robin's picker over subConns, as far as endpointPicker sees it.
type rrPicker struct {
	scs  []balancer.SubConn
	next int
}

func (p *rrPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	sc := p.scs[p.next%len(p.scs)]
	p.next++
	return balancer.PickResult{SubConn: sc}, nil
}

// The picker skips an endpoint whose circuit is open, probes it after its sleep,
// and refuses with the first endpoint's time to its probe when every one is open.
func TestPickerSkipsOpenEndpoints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := fixed(WithConsecutiveFailures(1), WithOpenFor(time.Second), WithProbes(1))
		a, z := &fakeSubConn{addr: "10.0.0.1:443"}, &fakeSubConn{addr: "10.0.0.2:443"}
		eb := &endpointBalancer{addrs: map[balancer.SubConn]string{a: a.addr, z: z.addr}}
		p := &endpointPicker{child: &rrPicker{scs: []balancer.SubConn{a, z}}, eb: eb, endpoints: 2}
		pick := func() (*fakeSubConn, func(balancer.DoneInfo), error) {
			n := &note{b: b, target: "dkt:///svc"}
			res, err := p.Pick(balancer.PickInfo{Ctx: context.WithValue(context.Background(), noteKey{}, n), FullMethodName: "/s/m"})
			if err != nil {
				return nil, nil, err
			}
			if !n.judged.Load() {
				t.Fatal("an endpoint's circuit admitted the call, and the note does not say so")
			}
			return res.SubConn.(*fakeSubConn), res.Done, nil
		}
		// a fails once: its circuit opens, and every pick goes to z.
		sc, done, err := pick()
		if err != nil || sc != a {
			t.Fatalf("first pick: %v, %v", sc, err)
		}
		done(balancer.DoneInfo{Err: errFail, BytesSent: true})
		for range 5 {
			sc, done, err := pick()
			if err != nil || sc != z {
				t.Fatalf("a open: picked %v, %v; want z", sc, err)
			}
			done(balancer.DoneInfo{BytesSent: true, BytesReceived: true})
		}
		// After a's sleep, a pick probes it; its success closes it.
		time.Sleep(time.Second)
		for {
			sc, done, err := pick()
			if err != nil {
				t.Fatal(err)
			}
			done(balancer.DoneInfo{BytesSent: true, BytesReceived: true})
			if sc == a {
				break
			}
		}
		if st := b.State("dkt:///svc@10.0.0.1:443"); st != Closed {
			t.Fatalf("a after a good probe: %v", st)
		}
		// Both fail: both open (z a quarter second later), and a pick is refused
		// with the time to a's probe, the first.
		for _, want := range []*fakeSubConn{a, z} {
			for {
				sc, done, err := pick()
				if err != nil {
					t.Fatal(err)
				}
				if sc == want {
					done(balancer.DoneInfo{Err: errFail, BytesSent: true})
					break
				}
				done(balancer.DoneInfo{BytesSent: true, BytesReceived: true})
			}
			if want == a {
				time.Sleep(250 * time.Millisecond)
			}
		}
		_, _, err = pick()
		var oe *OpenError
		if !errors.As(err, &oe) || oe.Target != "dkt:///svc@10.0.0.1:443" || oe.RetryAfter != 750*time.Millisecond {
			t.Fatalf("every endpoint open: %v, want a's refusal", err)
		}
	})
}

// A later copy of a call (a hedge, under the call's note) goes to an endpoint its
// earlier copies did not, while round_robin offers one; a call's first copy takes
// round_robin's pick, and so does a copy whose call has been everywhere.
func TestPickerSendsALaterCopyElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := fixed(WithConsecutiveFailures(5))
		a, z := &fakeSubConn{addr: "10.0.0.1:443"}, &fakeSubConn{addr: "10.0.0.2:443"}
		eb := &endpointBalancer{addrs: map[balancer.SubConn]string{a: a.addr, z: z.addr}, ready: map[balancer.SubConn]bool{a: true, z: true}}
		rr := &rrPicker{scs: []balancer.SubConn{a, z}}
		p := &endpointPicker{child: rr, eb: eb, endpoints: 2}
		pick := func(n *note) *fakeSubConn {
			t.Helper()
			res, err := p.Pick(balancer.PickInfo{Ctx: context.WithValue(context.Background(), noteKey{}, n), FullMethodName: "/s/m"})
			if err != nil {
				t.Fatal(err)
			}
			res.Done(balancer.DoneInfo{BytesSent: true, BytesReceived: true})
			return res.SubConn.(*fakeSubConn)
		}
		for round := range 4 {
			n := &note{b: b, target: "dkt:///svc"}
			// The call's first copy takes round_robin's pick; then round_robin's
			// next pick is the same endpoint again (another call took one between).
			first := pick(n)
			if want := rr.scs[(rr.next-1)%2]; first != want {
				t.Fatalf("round %d: first copy to %v; round_robin picked %v", round, first.addr, want)
			}
			rr.next--
			if got := pick(n); got == first {
				t.Fatalf("round %d: the hedge went to %v, where its primary is", round, got.addr)
			}
			// A third copy: both endpoints have one; it goes where round_robin says.
			rr.next = 0
			if got := pick(n); got != a {
				t.Fatalf("round %d: a third copy went to %v; want round_robin's pick, %v", round, got.addr, a.addr)
			}
		}
	})
}

// A later copy whose call's other endpoints are open goes where an earlier copy
// went, rather than being refused.
func TestPickerSendsALaterCopyBackWhenTheOthersAreOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := fixed(WithConsecutiveFailures(1), WithOpenFor(time.Second))
		a, z := &fakeSubConn{addr: "10.0.0.1:443"}, &fakeSubConn{addr: "10.0.0.2:443"}
		eb := &endpointBalancer{addrs: map[balancer.SubConn]string{a: a.addr, z: z.addr}, ready: map[balancer.SubConn]bool{a: true, z: true}}
		rr := &rrPicker{scs: []balancer.SubConn{a, z}}
		p := &endpointPicker{child: rr, eb: eb, endpoints: 2}
		pick := func(n *note, err error) (*fakeSubConn, error) {
			res, perr := p.Pick(balancer.PickInfo{Ctx: context.WithValue(context.Background(), noteKey{}, n), FullMethodName: "/s/m"})
			if perr != nil {
				return nil, perr
			}
			res.Done(balancer.DoneInfo{Err: err, BytesSent: true, BytesReceived: err == nil})
			return res.SubConn.(*fakeSubConn), nil
		}
		rr.next = 1
		if sc, err := pick(&note{b: b, target: "dkt:///svc"}, errFail); err != nil || sc != z {
			t.Fatalf("z's failing call went to %v, %v", sc, err)
		}
		n := &note{b: b, target: "dkt:///svc"}
		if sc, err := pick(n, nil); err != nil || sc != a {
			t.Fatalf("first copy: %v, %v; want a (z is open)", sc, err)
		}
		if sc, err := pick(n, nil); err != nil || sc != a {
			t.Fatalf("later copy: %v, %v; want a again (z is open)", sc, err)
		}
	})
}
