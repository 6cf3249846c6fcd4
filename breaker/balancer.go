package breaker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/roundrobin"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"
)

// BalancerName is the name of the gRPC load-balancing policy that gives each
// endpoint of a target a circuit of its own (registered when the package is
// imported). Select it with a service config:
//
//	grpc.WithDefaultServiceConfig(breaker.ServiceConfig)
//
// It is grpc-go's round_robin, whose picker skips the endpoints whose circuit is
// open: one replica's trouble no longer refuses the calls the others can serve (as
// Envoy's outlier detection and grpc-go's outlier_detection do). The circuits are
// those of the [Breaker] whose interceptor the call went through, named
// "target@address" (the ClientConn's target, the endpoint's address) in [Event],
// [Result], [Breaker.Circuit] and the spans; each counts the outcomes of the calls
// sent to its endpoint, when they end, by the same rules as a target's. When every
// endpoint's circuit is open, the call fails at once with the breaker's refusal
// ([ErrOpen], UNAVAILABLE, with the time until the first endpoint's next probe as
// its pushback), nothing sent. A pick that never reached its endpoint (grpc-go
// picks again when the connection was not ready) counts nothing.
//
// The target's own circuit stays for a target with one endpoint: with two or more,
// the calls that the endpoints' circuits judged do not count in it; a call that
// found no endpoint ready (round_robin's own failure) still does. A call that did
// not go through a Breaker's interceptor, and every call of a target with one
// endpoint, is picked by round_robin alone. Streams are counted when they end,
// probes included.
//
// A later copy of a call (a hedge, sent by a hedging layer beneath the Breaker's
// interceptor, as in deadlinekit.DialOptions) goes to an endpoint none of the
// call's earlier copies went to, when one is ready and its circuit admits the
// call: a hedge of a call stuck on a slow replica does not join it there. (Round
// robin alone sent about half of them back, with two replicas and calls made
// concurrently.) A retry's attempt is a call of its own, picked afresh.
const BalancerName = "deadlinekit_breaker"

// ServiceConfig is a service config selecting [BalancerName], for
// grpc.WithDefaultServiceConfig. It changes the ClientConn's policy from grpc-go's
// default, pick_first (every call to one endpoint), to round robin over the
// endpoints.
const ServiceConfig = `{"loadBalancingConfig":[{"` + BalancerName + `":{}}]}`

func init() { balancer.Register(endpointBuilder{}) }

// endpointsInUse is set once a balancer of BalancerName is built: until then the
// interceptors do not pay for the note they hand it.
var endpointsInUse atomic.Bool

type endpointBuilder struct{}

func (endpointBuilder) Name() string { return BalancerName }

func (endpointBuilder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	endpointsInUse.Store(true)
	eb := &endpointBalancer{addrs: map[balancer.SubConn]string{}, ready: map[balancer.SubConn]bool{}}
	eb.child = balancer.Get(roundrobin.Name).Build(&endpointConn{ClientConn: cc, eb: eb}, opts)
	return eb
}

// endpointBalancer is round_robin, seen through endpointConn: it learns which
// address each SubConn is, and hands the ClientConn round_robin's picker wrapped.
type endpointBalancer struct {
	child     balancer.Balancer
	endpoints atomic.Int64 // in the resolver's last state
	mu        sync.Mutex
	addrs     map[balancer.SubConn]string
	ready     map[balancer.SubConn]bool
}

func (eb *endpointBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	n := len(s.ResolverState.Endpoints)
	if n == 0 {
		n = len(s.ResolverState.Addresses)
	}
	eb.endpoints.Store(int64(n))
	return eb.child.UpdateClientConnState(balancer.ClientConnState{ResolverState: s.ResolverState})
}

func (eb *endpointBalancer) ResolverError(err error) { eb.child.ResolverError(err) }

// UpdateSubConnState is not called: every SubConn has its StateListener.
func (eb *endpointBalancer) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}

func (eb *endpointBalancer) Close()    { eb.child.Close() }
func (eb *endpointBalancer) ExitIdle() { eb.child.ExitIdle() }

// elsewhere returns a ready endpoint that no copy of n's call was sent to, whose
// circuit b admits calls to and whose throttle did not refuse this pick (rs).
func (eb *endpointBalancer) elsewhere(n *note, rs *pickRefusals) (balancer.SubConn, string, bool) {
	eb.mu.Lock()
	defer eb.mu.Unlock()
	for sc, addr := range eb.addrs {
		if !eb.ready[sc] || n.wasSentTo(addr) {
			continue
		}
		if c := n.b.circuit(key{kind: keyEndpoint, a: n.target, b: addr}); c != nil && (c.sleeping(int64(time.Since(c.epoch))) > 0 || rs.throttledBy(c)) {
			continue
		}
		return sc, addr, true
	}
	return nil, "", false
}

func (eb *endpointBalancer) addr(sc balancer.SubConn) (string, bool) {
	eb.mu.Lock()
	a, ok := eb.addrs[sc]
	eb.mu.Unlock()
	return a, ok
}

// endpointConn is the ClientConn round_robin sees.
type endpointConn struct {
	balancer.ClientConn
	eb *endpointBalancer
}

func (c *endpointConn) NewSubConn(addrs []resolver.Address, opts balancer.NewSubConnOptions) (balancer.SubConn, error) {
	eb := c.eb
	var sc balancer.SubConn
	if l := opts.StateListener; l != nil {
		opts.StateListener = func(s balancer.SubConnState) {
			eb.mu.Lock()
			if s.ConnectivityState == connectivity.Shutdown {
				delete(eb.addrs, sc)
				delete(eb.ready, sc)
			} else {
				eb.ready[sc] = s.ConnectivityState == connectivity.Ready
			}
			eb.mu.Unlock()
			l(s)
		}
	}
	//lint:ignore SA1019 the way a policy makes a SubConn; round_robin gives one address each
	sc, err := c.ClientConn.NewSubConn(addrs, opts)
	if err != nil || len(addrs) == 0 {
		return sc, err
	}
	eb.mu.Lock()
	eb.addrs[sc] = addrs[0].Addr
	eb.mu.Unlock()
	return sc, nil
}

func (c *endpointConn) UpdateState(s balancer.State) {
	if s.Picker != nil {
		s.Picker = &endpointPicker{child: s.Picker, eb: c.eb, endpoints: int(c.eb.endpoints.Load())}
	}
	c.ClientConn.UpdateState(s)
}

// note is what a Breaker's interceptor hands the picker on the call's context, and
// what the picker tells it back.
type note struct {
	b             *Breaker
	target        string
	stream        bool
	serverStreams bool
	// judged is set when the call's endpoints have circuits: its outcome is theirs.
	judged atomic.Bool
	// probe is, for a stream admitted as its endpoint's probe, the ticket to judge
	// at its first answer.
	probe atomic.Pointer[streamTicket]
	// sent are the endpoints the call's copies were sent to (a hedge layer beneath
	// the Breaker's interceptor sends its copies under the call's note): a later
	// copy goes to another endpoint when one is up, so that a hedge of a call stuck
	// on a slow replica does not join it there.
	sentMu sync.Mutex
	nsent  atomic.Int32
	sent   [4]string
}

// sentTo notes that a copy of the call was sent to the endpoint addr.
func (n *note) sentTo(addr string) {
	n.sentMu.Lock()
	defer n.sentMu.Unlock()
	if k := int(n.nsent.Load()); k < len(n.sent) {
		n.sent[k] = addr
		n.nsent.Store(int32(k + 1))
	}
}

// wasSentTo reports whether a copy of the call was sent to the endpoint addr.
func (n *note) wasSentTo(addr string) bool {
	if n.nsent.Load() == 0 {
		return false
	}
	n.sentMu.Lock()
	defer n.sentMu.Unlock()
	for _, a := range n.sent[:n.nsent.Load()] {
		if a == addr {
			return true
		}
	}
	return false
}

type noteKey struct{}

func noteOf(ctx context.Context) *note {
	n, _ := ctx.Value(noteKey{}).(*note)
	return n
}

type endpointPicker struct {
	child     balancer.Picker
	eb        *endpointBalancer
	endpoints int
}

// Pick asks round_robin for an endpoint until it finds one whose circuit admits the
// call, at most once per endpoint: one whose circuit is open, or whose adaptive
// throttle refuses the call, is skipped for the next. When every endpoint refused,
// the call fails with the throttle's refusal if one refused it, else the circuits'.
// A later copy of a call (a hedge) goes to a ready endpoint its earlier copies did
// not go to, when there is one whose circuit admits it.
func (p *endpointPicker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	n := noteOf(info.Ctx)
	if n == nil || p.endpoints < 2 {
		return p.child.Pick(info)
	}
	b, ctx := n.b, info.Ctx
	var rs pickRefusals
	for range p.endpoints {
		res, err := p.child.Pick(info)
		if err != nil {
			return res, err
		}
		addr, ok := p.eb.addr(res.SubConn)
		if !ok {
			return res, nil
		}
		if n.wasSentTo(addr) {
			// An earlier copy of the call is there: another endpoint, if one is
			// ready and admits calls, else this one all the same.
			if sc, a, ok := p.eb.elsewhere(n, &rs); ok {
				if res.Done != nil {
					res.Done(balancer.DoneInfo{})
				}
				res, addr = balancer.PickResult{SubConn: sc}, a
			}
		}
		c := b.circuit(key{kind: keyEndpoint, a: n.target, b: addr})
		if c == nil {
			return res, nil
		}
		if w := c.sleeping(int64(time.Since(c.epoch))); w > 0 || rs.throttledBy(c) {
			if w > 0 {
				rs.open(c, w)
			}
			if res.Done != nil {
				res.Done(balancer.DoneInfo{})
			}
			continue
		}
		st := &streamTicket{method: info.FullMethodName, serverStreams: n.serverStreams}
		st.t.stream = n.stream
		if err := b.admit(ctx, c, &st.t); err != nil {
			rs.add(c, err)
			if res.Done != nil {
				res.Done(balancer.DoneInfo{})
			}
			continue
		}
		if n.stream && st.t.probe {
			n.probe.Store(st)
		}
		n.judged.Store(true)
		n.sentTo(addr)
		res.Done = b.endpointDone(ctx, st, res.Done)
		return res, nil
	}
	if rs.throttled != nil {
		// Every endpoint refused: those that are up, for load.
		n.judged.Store(true)
		return balancer.PickResult{}, rs.throttled.carried()
	}
	if rs.first == nil {
		return p.child.Pick(info)
	}
	n.judged.Store(true)
	return balancer.PickResult{}, b.refuse(ctx, rs.first, Open, rs.wait).(*OpenError).carried()
}

// pickRefusals gathers the refusals of one pick's endpoints.
type pickRefusals struct {
	first     *circuit // the open circuit whose probe comes first
	wait      int64
	throttled *ThrottledError // an endpoint's throttle refused the call
	// tried are the circuits whose throttle refused the call: round_robin picks
	// only the ready endpoints, and may pick one again, whose throttle must not
	// draw (and count a request) twice for one call.
	tried [8]*circuit
	n     int
}

func (r *pickRefusals) open(c *circuit, wait int64) {
	if r.first == nil || wait < r.wait {
		r.first, r.wait = c, wait
	}
}

// add takes an admission's refusal by c.
func (r *pickRefusals) add(c *circuit, err error) {
	switch e := err.(type) {
	case *OpenError:
		r.open(c, int64(e.RetryAfter))
	case *ThrottledError:
		r.throttled = e
		if r.n < len(r.tried) {
			r.tried[r.n] = c
			r.n++
		}
	}
}

// throttledBy reports whether c's throttle refused the call already.
func (r *pickRefusals) throttledBy(c *circuit) bool {
	for _, t := range r.tried[:r.n] {
		if t == c {
			return true
		}
	}
	return false
}

// endpointDone returns the Done of a pick admitted by st: it counts the call's
// outcome, unless the call never reached the endpoint, then calls done.
func (b *Breaker) endpointDone(ctx context.Context, st *streamTicket, done func(balancer.DoneInfo)) func(balancer.DoneInfo) {
	return func(di balancer.DoneInfo) {
		switch {
		case di.Err == nil && !di.BytesSent:
			if st.reported.CompareAndSwap(false, true) {
				b.forget(&st.t)
			}
		case st.t.stream:
			if di.BytesReceived {
				st.answered.Store(true)
			}
			b.streamEnded(ctx, st, di.Err, di.Trailer)
		default:
			b.done(ctx, &st.t, &Result{Method: st.method, GRPC: true, Err: di.Err, Trailer: di.Trailer})
		}
		if done != nil {
			done(di)
		}
	}
}

// sleeping returns, when c is open and sleeping at ns, the time until its next
// probe; zero or less otherwise.
func (c *circuit) sleeping(ns int64) int64 {
	if stateOf(c.sg.Load()) != Open {
		return 0
	}
	return c.until.Load() - ns
}

// forget releases the call t admitted without counting it: it was not sent.
func (b *Breaker) forget(t *ticket) {
	if !t.probe {
		return
	}
	c := t.c
	c.mu.Lock()
	if c.sg.Load() == t.sg {
		c.inflight--
	}
	c.mu.Unlock()
}
