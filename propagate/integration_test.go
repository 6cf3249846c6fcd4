package propagate_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/propagate"
)

// hopLog collects what each hop of the chain observed.
type hopLog struct {
	mu        sync.Mutex
	budget    map[string]time.Duration
	cArrived  time.Time
	cEnded    time.Time
	cDeadline time.Time
	twinEnded time.Time // a bare context with C's deadline, waited on beside C's
}

func (l *hopLog) saw(hop string, ctx context.Context) {
	left, _ := deadline.Remaining(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.budget[hop] = left
}

// chainB is hop B: a gRPC service that calls C over HTTP.
type chainB struct {
	testgrpc.UnimplementedTestServiceServer
	log  *hopLog
	cURL string
	http *http.Client
}

func (b *chainB) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	b.log.saw("B", ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.cURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusGatewayTimeout {
		// C ran out of time: so did this call (not an answer to relay as OK).
		return nil, status.Error(codes.DeadlineExceeded, "C answered 504")
	}
	return &testgrpc.SimpleResponse{}, nil
}

// chainResult is what one run of the chain observed.
type chainResult struct {
	a, b, c        time.Duration // budget each hop saw on arrival
	cDeadlineDelta time.Duration // C's deadline − the client's
	cEndedDelta    time.Duration // when C saw its context end − the client's deadline
	cLate, twin    time.Duration // how late C saw its own deadline, and a bare timer beside it
	transit        time.Duration // from the client sending to C receiving
}

// runChain runs client → A (HTTP) → B (gRPC) → C (HTTP) on loopback with real
// servers, C waiting for its context to end.
func runChain(t *testing.T) chainResult {
	t.Helper()
	log := &hopLog{budget: map[string]time.Duration{}}

	c := httptest.NewServer(propagate.NewMiddleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.saw("C", r.Context())
		arrived := time.Now()
		dl, _ := r.Context().Deadline()
		// The twin: the same deadline on a bare context, waited on by a goroutine of
		// its own, so that the machine's lateness at that moment is measured too.
		//deadlinevet:detached a baseline timer, deliberately apart from the request
		twin, cancel := context.WithDeadline(context.Background(), dl)
		defer cancel()
		twinDone := make(chan time.Time, 1)
		go func() { <-twin.Done(); twinDone <- time.Now() }()
		<-r.Context().Done()
		ended := time.Now()
		twinEnded := <-twinDone
		log.mu.Lock()
		log.cArrived, log.cEnded, log.cDeadline, log.twinEnded = arrived, ended, dl, twinEnded
		log.mu.Unlock()
		w.WriteHeader(http.StatusGatewayTimeout)
	})))
	defer c.Close()
	hopClient := &http.Client{Transport: propagate.NewTransport(nil)}
	defer hopClient.CloseIdleConnections()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(propagate.UnaryServerInterceptor()))
	testgrpc.RegisterTestServiceServer(gs, &chainB{log: log, cURL: c.URL, http: hopClient})
	go gs.Serve(lis)
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(propagate.UnaryClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bClient := testgrpc.NewTestServiceClient(conn)

	a := httptest.NewServer(propagate.NewMiddleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.saw("A", r.Context())
		if _, err := bClient.UnaryCall(r.Context(), &testgrpc.SimpleRequest{}); err != nil {
			http.Error(w, err.Error(), http.StatusGatewayTimeout)
		}
	})))
	defer a.Close()

	ctx, cancel := context.WithTimeout(context.Background(), chainBudget)
	defer cancel()
	clientDeadline, _ := ctx.Deadline()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL, nil)
	client := &http.Client{Transport: propagate.NewTransport(nil)}
	defer client.CloseIdleConnections()
	sent := time.Now()
	resp, err := client.Do(req)
	switch {
	case err == nil:
		// A hop's deadline may fire a hair before the client's: then the 504 of
		// the chain reaches the client just in time.
		resp.Body.Close()
		if resp.StatusCode != http.StatusGatewayTimeout {
			t.Fatalf("client got %s; want 504 or its own deadline", resp.Status)
		}
	case !errors.Is(err, context.DeadlineExceeded):
		t.Fatalf("client: %v; want its own deadline to end the call", err)
	}
	c.Close() // waits for C's handler to return

	log.mu.Lock()
	defer log.mu.Unlock()
	return chainResult{
		a: log.budget["A"], b: log.budget["B"], c: log.budget["C"],
		cDeadlineDelta: log.cDeadline.Sub(clientDeadline),
		cEndedDelta:    log.cEnded.Sub(clientDeadline),
		cLate:          log.cEnded.Sub(log.cDeadline),
		twin:           max(log.twinEnded.Sub(log.cDeadline), 0),
		transit:        log.cArrived.Sub(sent),
	}
}

const chainBudget = 300 * time.Millisecond

// TestChainHTTPGRPCHTTP: every hop reports the budget it saw; the budgets decrease
// hop by hop; the last hop's context carries the client's deadline (it travelled as
// grpc-timeout over two protocols) and ends at it.
//
// Two figures depend on the machine, and are checked against what the same run
// measured of it. A relative timeout starts again when each hop reads it, so each hop
// adds its transit time to the deadline (tens of µs on loopback, tens of ms on a
// loaded machine): C's deadline may be later than the client's by the time from the
// client's send to C's arrival, and at least 25 ms is allowed. When C notices its
// context ending is a goroutine's wake-up: it may be late by 10 ms plus three times
// what a bare timer with the same deadline, waited on beside it, was late by, in one
// of up to three runs (every run is logged).
// Without propagation C's deadline would be its 30 s default.
func TestChainHTTPGRPCHTTP(t *testing.T) {
	var late []string
	for run := 1; run <= 3; run++ {
		r := runChain(t)
		t.Logf("run %d: budgets seen: A %v, B %v, C %v; C's deadline %v from the client's (transit %v); C's context ended %v after the client's deadline, %v after its own (a bare timer beside it: %v)",
			run, r.a, r.b, r.c, r.cDeadlineDelta, r.transit, r.cEndedDelta, r.cLate, r.twin)
		if !(chainBudget > r.a && r.a > r.b && r.b > r.c && r.c > 0) {
			t.Fatalf("budgets do not decrease hop by hop: client %v, A %v, B %v, C %v", chainBudget, r.a, r.b, r.c)
		}
		// Rounding down takes up to a unit off per hop.
		if d, later := r.cDeadlineDelta, max(25*time.Millisecond, r.transit); d < -25*time.Millisecond || d > later {
			t.Fatalf("C's deadline is %v from the client's; want within -25ms..%v (the transit to C)", d, later)
		}
		if r.cLate <= 10*time.Millisecond+3*r.twin {
			return
		}
		late = append(late, fmt.Sprintf("%v (a bare timer %v)", r.cLate, r.twin))
	}
	t.Fatalf("C's context ended after its deadline by %v in three runs; want within 10ms + 3 × a bare timer's lateness in one", late)
}

// TestTransportDoesNotHandOutDialTime: when the transport has to dial first, the time
// spent connecting is not part of the budget sent downstream.
func TestTransportDoesNotHandOutDialTime(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Grpc-Timeout")
	}))
	defer srv.Close()
	const dialDelay = 30 * time.Millisecond
	base := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		select { // a slow handshake
		case <-time.After(dialDelay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	defer base.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := (&http.Client{Transport: propagate.NewTransport(base)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sent, err := propagate.DecodeGRPCTimeout(got)
	if err != nil {
		t.Fatal(err)
	}
	if sent > time.Second-dialDelay {
		t.Fatalf("sent %v after a %v dial from a 1s budget; want at most %v", sent, dialDelay, time.Second-dialDelay)
	}
}
