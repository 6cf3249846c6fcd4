package breaker_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/criticality"
)

// An overloaded target is up: it answers its critical calls at once and its
// sheddable ones never (each is held until its caller's deadline passes, as a
// server whose queue is longer than the deadlines does). Each test sends a burst of
// sheddable calls with a fair budget, answers critical calls once every one of
// them has been let through by the breaker, and lets their timeouts reach the
// breaker only after that (a layer beneath the breaker notes each call and holds
// its timeout back until released), so that the order of events is the test's, not
// the scheduler's: the critical calls were answered while the sheddable ones ran.
// (Whether a sheddable call reached the server before its deadline does not
// matter: on a loaded machine some may not.)
const (
	sheddableCalls = 60 // far more than the minimum of calls and the consecutive trip
	criticalCalls  = 10
	fairBudget     = 100 * time.Millisecond // far above the target's typical latency (< 1 ms)
)

// held is how a test holds the calls that wait: sent receives one value per call
// the breaker let through; the calls end once release is closed.
type held struct{ sent, release chan struct{} }

func newHeld() held { return held{make(chan struct{}, sheddableCalls), make(chan struct{})} }

// holdingGRPCClient returns a new breaker and a client of the gRPC server at addr
// through it; beneath the breaker, a call for which hold reports true is counted on
// h.sent once sent and answered only once h.release is closed.
func holdingGRPCClient(t *testing.T, addr string, h held, hold func(ctx context.Context, method string) bool) (*breaker.Breaker, testgrpc.TestServiceClient) {
	t.Helper()
	holder := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if !hold(ctx, method) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		h.sent <- struct{}{}
		err := invoker(ctx, method, req, reply, cc, opts...)
		<-h.release
		return err
	}
	b := breaker.New()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(b.UnaryClientInterceptor(), holder))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return b, testgrpc.NewTestServiceClient(cc)
}

// burst sends sheddableCalls calls with send at level, each with fairBudget, waits
// until the breaker let every one through, calls answered criticalCalls times
// meanwhile (each must succeed), then lets the held calls end and returns their
// errors.
func (h held) burst(t *testing.T, level criticality.Level, send func(context.Context) error, answered func() error) []error {
	t.Helper()
	errs := make(chan error, sheddableCalls)
	var wg sync.WaitGroup
	for range sheddableCalls {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(criticality.With(bg, level), fairBudget)
			defer cancel()
			errs <- send(ctx)
		})
	}
	for range sheddableCalls {
		<-h.sent // every held call is on its way
	}
	for i := range criticalCalls {
		if err := answered(); err != nil {
			t.Fatalf("answered call %d while the others wait: %v", i+1, err)
		}
	}
	close(h.release)
	wg.Wait()
	close(errs)
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}

// overloadedHTTP is a loopback HTTP server that answers /critical with answer at
// once and holds every other request until its caller gives up.
func overloadedHTTP(t *testing.T, answer http.HandlerFunc) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/critical" {
			answer(w, r)
			return
		}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	return srv
}

// heldTransport sends through base; for every call but those to /critical, it
// sends a value on sent first (the breaker has let the call through), and holds
// the call's end until release is closed.
type heldTransport struct {
	base http.RoundTripper
	held
}

func (h heldTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Path == "/critical" {
		return h.base.RoundTrip(req)
	}
	h.sent <- struct{}{}
	resp, err := h.base.RoundTrip(req)
	<-h.release
	return resp, err
}

// sheddableTimeoutsAmongAnswers sends sheddableCalls sheddable calls to an
// overloadedHTTP server through a default breaker, answers criticalCalls critical
// calls while they wait, then lets their timeouts through, and checks that the
// circuit stayed closed: the critical calls still go, and the timeouts counted as
// neither failures nor successes. wantCode is the critical calls' answer; opts
// come after the defaults (deadlinekit.NewTransport's).
func sheddableTimeoutsAmongAnswers(t *testing.T, answer http.HandlerFunc, wantCode int, opts ...breaker.Option) {
	srv := overloadedHTTP(t, answer)
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	h := newHeld()
	b := breaker.New(opts...)
	client := &http.Client{Transport: b.Transport(heldTransport{base: base, held: h})}
	critical := func() error {
		code, err := get(criticality.With(bg, criticality.Critical), client, srv.URL+"/critical")
		if err == nil && code != wantCode {
			err = errors.New(http.StatusText(code))
		}
		return err
	}
	if err := critical(); err != nil {
		t.Fatal(err)
	}
	sheddable := func(ctx context.Context) error { _, err := get(ctx, client, srv.URL+"/sheddable"); return err }
	for _, err := range h.burst(t, criticality.Sheddable, sheddable, critical) {
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("sheddable call: %v, want its deadline exceeded", err)
		}
	}
	if err := critical(); err != nil {
		t.Fatalf("critical call after %d sheddable timeouts of an answering target: %v (%+v)", sheddableCalls, err, b.Stats())
	}
	target := breaker.TargetName("http", srv.Listener.Addr().String())
	if s := b.Stats(); s.Failures != 0 || s.Opens != 0 || s.Neutral < sheddableCalls || b.State(target) != breaker.Closed {
		t.Fatalf("after %d sheddable timeouts among critical answers: %+v, %v", sheddableCalls, s, b.State(target))
	}
}

func TestHTTPOverloadedTargetAnsweringCriticalCallsStaysClosed(t *testing.T) {
	sheddableTimeoutsAmongAnswers(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}, http.StatusOK)
}

// A target that serves nothing for a while but answers at once that it is
// overloaded (503 with Retry-After: a guard's refusal) is up too: the timeouts of
// the calls it let wait meanwhile are not its failure. This is the circuit's rule
// alone, with the throttle off: on (the default), it would refuse locally half the
// calls of every level after the target's first refusal, and more after each, which
// is its job (TestThrottle*) but leaves this test no burst to hold.
func TestHTTPOverloadedTargetRefusingForLoadStaysClosed(t *testing.T) {
	sheddableTimeoutsAmongAnswers(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
	}, http.StatusServiceUnavailable, breaker.WithoutAdaptiveThrottling())
}

// A target that hangs most of its calls and answers some, all of one level, is
// failing, not shedding: the timeouts count, and the circuit opens, as it did
// before timeouts were weighed against the target's other answers.
func TestHTTPTargetHangingMostCallsOfOneLevelStillOpens(t *testing.T) {
	srv := overloadedHTTP(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	h := newHeld()
	b := breaker.New()
	client := &http.Client{Transport: b.Transport(heldTransport{base: base, held: h})}
	answered := func() error { // served at once, at the same level as the hung calls
		_, err := get(criticality.With(bg, criticality.Sheddable), client, srv.URL+"/critical")
		return err
	}
	h.burst(t, criticality.Sheddable, func(ctx context.Context) error { _, err := get(ctx, client, srv.URL+"/hangs"); return err }, answered)
	if err := answered(); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("after %d timeouts among %d answers of the same level: %v, want the circuit open (%+v)", sheddableCalls, criticalCalls, err, b.Stats())
	}
}

// A target that answered, then stopped answering anything (blackholed: every call
// times out), opens the circuit as it did before timeouts were weighed against the
// target's other answers: after DefaultConsecutiveFailures calls.
func TestHTTPBlackholedTargetStillOpens(t *testing.T) {
	be := newBackend(t)
	b := breaker.New()
	client := &http.Client{Transport: b.Transport(nil)}
	defer client.CloseIdleConnections()
	for range 20 {
		if _, err := get(bg, client, be.URL); err != nil {
			t.Fatal(err)
		}
	}
	be.delay.Store(int64(time.Hour))
	call := func() error {
		ctx, cancel := context.WithTimeout(criticality.With(bg, criticality.Critical), fairBudget)
		defer cancel()
		_, err := get(ctx, client, be.URL)
		return err
	}
	for i := range breaker.DefaultConsecutiveFailures {
		if err := call(); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("call %d to the blackholed target: %v, want its deadline exceeded", i+1, err)
		}
	}
	if err := call(); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("after %d timeouts of a blackholed target: %v, want the circuit open (%+v)", breaker.DefaultConsecutiveFailures, err, b.Stats())
	}
}

// overloadedGRPC answers UnaryCall (the critical calls) at once, unless
// blackholed, and holds EmptyCall (the sheddable ones) until its caller gives up.
type overloadedGRPC struct {
	testgrpc.UnimplementedTestServiceServer
	blackholed atomic.Bool
}

func (s *overloadedGRPC) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if s.blackholed.Load() {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &testgrpc.SimpleResponse{}, nil
}

func (s *overloadedGRPC) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

func TestGRPCOverloadedTargetAnsweringCriticalCallsStaysClosed(t *testing.T) {
	s := &overloadedGRPC{}
	addr := listenGRPC(t, s)
	h := newHeld()
	b, client := holdingGRPCClient(t, addr, h, func(ctx context.Context, _ string) bool { return criticality.From(ctx) < criticality.Critical })
	critical := func() error {
		_, err := client.UnaryCall(criticality.With(bg, criticality.Critical), &testgrpc.SimpleRequest{})
		return err
	}
	if err := critical(); err != nil {
		t.Fatal(err)
	}
	sheddable := func(ctx context.Context) error { _, err := client.EmptyCall(ctx, &testgrpc.Empty{}); return err }
	for _, err := range h.burst(t, criticality.Sheddable, sheddable, critical) {
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("sheddable call: %v, want DEADLINE_EXCEEDED", err)
		}
	}
	if err := critical(); err != nil {
		t.Fatalf("critical call after %d sheddable timeouts of an answering target: %v (%+v)", sheddableCalls, err, b.Stats())
	}
	if st := b.Stats(); st.Failures != 0 || st.Opens != 0 || st.Neutral != sheddableCalls || b.State(addr) != breaker.Closed {
		t.Fatalf("after %d sheddable timeouts among critical answers: %+v, %v", sheddableCalls, st, b.State(addr))
	}
}

func TestGRPCBlackholedTargetStillOpens(t *testing.T) {
	s := &overloadedGRPC{}
	b := breaker.New()
	addr := listenGRPC(t, s)
	client := dialGRPC(t, addr, b)
	for range 20 {
		if _, err := client.UnaryCall(bg, &testgrpc.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	s.blackholed.Store(true)
	call := func() error {
		ctx, cancel := context.WithTimeout(criticality.With(bg, criticality.Critical), fairBudget)
		defer cancel()
		_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		return err
	}
	for i := range breaker.DefaultConsecutiveFailures {
		if err := call(); status.Code(err) != codes.DeadlineExceeded || errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("call %d to the blackholed target: %v, want DEADLINE_EXCEEDED", i+1, err)
		}
	}
	if err := call(); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("after %d timeouts of a blackholed target: %v, want the circuit open (%+v)", breaker.DefaultConsecutiveFailures, err, b.Stats())
	}
	if b.State(addr) != breaker.Open {
		t.Fatalf("state %v", b.State(addr))
	}
}
