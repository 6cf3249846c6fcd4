package chaintest_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
)

// payflow is the chain, each hop with the root stack and a breaker of its
// own that the test reads: user → gateway (HTTP) → two payments replicas (gRPC, one
// ClientConn over both) → ledger (HTTP). Every breaker opens on 3 failures in a row,
// so that one failure counted where it should be neutral shows.
type payflow struct {
	user                  *http.Client
	gateway               string
	target                string // the gateway's ClientConn target
	replicas              [2]*payments
	bUser, bGw, bPayments *breaker.Breaker
	ledger                atomic.Pointer[http.HandlerFunc]
	ledgerRuns            atomic.Int32
}

// payments is a replica; shed makes it answer UNAVAILABLE at once, with a pushback
// when pushback is set (a guard shedding load), without one when not (a replica in
// trouble).
type payments struct {
	testgrpc.UnimplementedTestServiceServer
	p        *payflow
	client   *http.Client
	ledger   string
	addr     string
	shed     atomic.Bool
	pushback atomic.Bool
	runs     atomic.Int32
}

func (r *payments) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	r.runs.Add(1)
	if r.shed.Load() {
		if r.pushback.Load() {
			grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "50"))
		}
		return nil, status.Error(codes.Unavailable, "payments: shedding")
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.ledger+"/charge", strings.NewReader("10 EUR"))
	resp, err := r.client.Do(req)
	if err := deadlinekit.FromHTTP(resp, err); err != nil {
		return nil, deadlinekit.GRPCError(ctx, err)
	}
	resp.Body.Close()
	return &testgrpc.SimpleResponse{}, nil
}

func newPayflow(t *testing.T) *payflow {
	t.Helper()
	strict := func() *breaker.Breaker {
		return breaker.New(breaker.WithConsecutiveFailures(3), breaker.WithMinCalls(5), breaker.WithOpenFor(time.Hour))
	}
	p := &payflow{bUser: strict(), bGw: strict(), bPayments: strict()}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "charged") })
	p.ledger.Store(&ok)
	ledger := httptest.NewServer(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.ledgerRuns.Add(1)
		(*p.ledger.Load())(w, r)
	})))
	t.Cleanup(ledger.Close)
	toLedger := stackClient(t, deadlinekit.WithSharedBreaker(p.bPayments))

	var eps []resolver.Endpoint
	for i := range p.replicas {
		r := &payments{p: p, client: toLedger, ledger: ledger.URL}
		p.replicas[i] = r
		gs := grpc.NewServer(deadlinekit.ServerOptions()...)
		testgrpc.RegisterTestServiceServer(gs, r)
		r.addr = serveGRPC(t, gs)
		eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{{Addr: r.addr}}})
	}
	res := manual.NewBuilderWithScheme("payflow")
	res.InitialState(resolver.State{Endpoints: eps})
	p.target = "payflow:///payments"
	conn := dial(t, p.target, append(deadlinekit.DialOptions(deadlinekit.WithSharedBreaker(p.bGw)), grpc.WithResolvers(res))...)
	toPayments := testgrpc.NewTestServiceClient(conn)

	mux := http.NewServeMux()
	mux.HandleFunc("POST /pay", func(w http.ResponseWriter, r *http.Request) {
		var tr metadata.MD
		if _, err := toPayments.UnaryCall(r.Context(), &testgrpc.SimpleRequest{}, grpc.Trailer(&tr)); err != nil {
			deadlinekit.WriteHTTPError(w, deadlinekit.FromGRPC(err, &tr))
			return
		}
		io.WriteString(w, "paid")
	})
	gw := httptest.NewServer(deadlinekit.NewHandler(mux))
	t.Cleanup(gw.Close)
	p.gateway = gw.URL
	p.user = stackClient(t, deadlinekit.WithSharedBreaker(p.bUser))
	// Both replicas are ready once each has served a payment.
	for i := 0; p.replicas[0].runs.Load() == 0 || p.replicas[1].runs.Load() == 0; i++ {
		if i == 100 {
			t.Fatal("100 payments went to one replica: DialOptions' policy is not round robin")
		}
		if code := p.pay(t, 5*time.Second); code != http.StatusOK {
			t.Fatalf("warm-up payment: %d", code)
		}
	}
	return p
}

// pay sends one payment with the budget given and returns the user's status.
func (p *payflow) pay(t *testing.T, budget time.Duration) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.gateway+"/pay", nil)
	resp, err := p.user.Do(req)
	if err != nil {
		t.Fatalf("payment: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// payMany sends n payments from 8 goroutines and returns how many were answered 200.
func (p *payflow) payMany(t *testing.T, n int, budget time.Duration) int {
	t.Helper()
	var wg sync.WaitGroup
	var ok atomic.Int32
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	for range 8 {
		wg.Go(func() {
			for range next {
				if p.pay(t, budget) == http.StatusOK {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(ok.Load())
}

// closedEverywhere fails the test for each breaker among bs that counted a failure
// or opened a circuit, or that saw no failed payment at all: each payment was sent
// and judged, or refused locally by the throttle (on by default) because the
// target refused for load.
func closedEverywhere(t *testing.T, payments int, names []string, bs ...*breaker.Breaker) {
	t.Helper()
	for i, b := range bs {
		if s := b.Stats(); s.Failures != 0 || s.Opens != 0 {
			t.Errorf("%s's breaker counted %d failures and opened %d times; want none (%+v)", names[i], s.Failures, s.Opens, s)
		}
		if s := b.Stats(); s.Neutral+s.Successes+s.Throttled < uint64(payments) {
			t.Errorf("%s's breaker judged or throttled %d calls; want the %d failed payments at least (%+v)", names[i], s.Neutral+s.Successes+s.Throttled, payments, s)
		}
	}
}

// The ledger's store is down, and it answers as dedup does then: a prompt 503 with
// Retry-After. Payments relays it (503 with a wait is UNAVAILABLE or
// RESOURCE_EXHAUSTED with a pushback, marked relayed), the gateway relays that (a 503
// marked deadlinekit-relayed): no breaker on the way counts a failure.
func TestChainStoreDownKeepsEveryBreakerClosed(t *testing.T) {
	p := newPayflow(t)
	down := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "store unavailable", http.StatusServiceUnavailable)
	})
	p.ledger.Store(&down)
	if ok := p.payMany(t, 16, 5*time.Second); ok != 0 {
		t.Fatalf("%d payments answered 200 with the ledger's store down", ok)
	}
	closedEverywhere(t, 16, []string{"ledger's caller (payments)", "gateway", "user"}, p.bPayments, p.bGw, p.bUser)
}

// The ledger's own downstream timed out, and it says so at once: 504. Payments
// relays it as a DEADLINE_EXCEEDED marked relayed (its own breaker on the ledger
// rightly counts the 504), the gateway relays that as a 504 marked relayed: the
// gateway's and the user's breakers count no failure.
func TestChainRelayedTimeoutsKeepTheCallersClosed(t *testing.T) {
	p := newPayflow(t)
	timeout := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "ledger: bank timed out", http.StatusGatewayTimeout)
	})
	p.ledger.Store(&timeout)
	if ok := p.payMany(t, 40, 5*time.Second); ok != 0 {
		t.Fatalf("%d payments answered 200 with the ledger timing out", ok)
	}
	closedEverywhere(t, 40, []string{"gateway", "user"}, p.bGw, p.bUser)
	if p.bPayments.Stats().Failures == 0 {
		t.Error("payments' breaker counted no failure of the ledger's 504s")
	}
}

// A payments replica sheds load: UNAVAILABLE with grpc-retry-pushback-ms. The
// gateway's circuit on it stays closed, and so does the user's; the gateway's
// throttle (on by default) sends the shedding replicas less, which the user's
// breaker reads as the gateway relaying, not failing.
func TestChainPushbackKeepsEveryBreakerClosed(t *testing.T) {
	p := newPayflow(t)
	for _, r := range p.replicas {
		r.pushback.Store(true)
		r.shed.Store(true)
	}
	if ok := p.payMany(t, 40, 5*time.Second); ok != 0 {
		t.Fatalf("%d payments answered 200 with every replica shedding", ok)
	}
	closedEverywhere(t, 40, []string{"gateway", "user"}, p.bGw, p.bUser)
	if s := p.bGw.Stats(); s.Throttled == 0 {
		t.Errorf("the gateway sent every payment to replicas refusing all of them for load: %+v", s)
	}
	if s := p.bUser.Stats(); s.Throttled != 0 {
		t.Errorf("the user's client throttled a gateway that relays its replicas' refusals: %+v", s)
	}
}

// One replica fails (UNAVAILABLE, no pushback): the gateway's circuit on that
// replica opens, and the payments keep being answered by the other. The gateway's
// circuit on the whole target, and the user's, stay closed.
func TestChainOneReplicaDownOpensItsCircuitOnly(t *testing.T) {
	p := newPayflow(t)
	bad := p.replicas[1]
	bad.shed.Store(true)
	failed := 0
	for range 40 {
		if p.pay(t, 5*time.Second) != http.StatusOK {
			failed++
		}
	}
	if failed != 3 {
		t.Errorf("%d of 40 payments failed; want 3, the failures that open the replica's circuit", failed)
	}
	if st := p.bGw.State(p.target + "@" + bad.addr); st != breaker.Open {
		t.Errorf("the gateway's circuit on the failing replica is %v; want open", st)
	}
	if st := p.bGw.State(p.target); st != breaker.Closed {
		t.Errorf("the gateway's circuit on the whole service is %v; want closed", st)
	}
	if s := p.bUser.Stats(); s.Failures != 0 || s.Opens != 0 {
		t.Errorf("the user's breaker counted %d failures, opened %d times; want none", s.Failures, s.Opens)
	}
}
