package breaker_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

// listenGRPC starts a loopback server of s and returns its address.
func listenGRPC(t *testing.T, s testgrpc.TestServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(gs, s)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// dialEndpoints returns a client of the endpoints addrs, through b's interceptors,
// with the per-endpoint policy, and its target.
func dialEndpoints(t *testing.T, b *breaker.Breaker, addrs ...string) (testgrpc.TestServiceClient, string) {
	t.Helper()
	r := manual.NewBuilderWithScheme("dkt")
	var eps []resolver.Endpoint
	for _, a := range addrs {
		eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}})
	}
	r.InitialState(resolver.State{Endpoints: eps})
	target := "dkt:///payments"
	cc, err := grpc.NewClient(target, grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(breaker.ServiceConfig),
		grpc.WithChainUnaryInterceptor(b.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(b.StreamClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc), target
}

// untilBoth calls until both backends have answered: both endpoints are ready.
func untilBoth(t *testing.T, client testgrpc.TestServiceClient, a, b *grpcBackend) {
	t.Helper()
	// round_robin picks only ready connections: on a loaded machine the second
	// may take a while to connect, so the bound is generous and in time, and the
	// calls are paced so that a hundred of them are no proof.
	start := time.Now()
	for a.hits.Load() == 0 || b.hits.Load() == 0 {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("30 s of calls went to one backend (%d, %d): the policy is not round robin", a.hits.Load(), b.hits.Load())
		}
		time.Sleep(time.Millisecond)
		if _, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEndpointCircuitSkipsTheFailingReplica(t *testing.T) {
	var mu sync.Mutex
	var events []breaker.Event
	b := breaker.New(breaker.WithConsecutiveFailures(3), breaker.WithProbes(1),
		breaker.WithSleep(breaker.Sleep{First: 100 * time.Millisecond, Factor: 1}),
		breaker.WithObserver(func(_ context.Context, e breaker.Event) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}))
	good, bad := &grpcBackend{}, &grpcBackend{}
	goodAddr, badAddr := listenGRPC(t, good), listenGRPC(t, bad)
	client, target := dialEndpoints(t, b, goodAddr, badAddr)
	untilBoth(t, client, good, bad)
	ctx := context.Background()

	bad.failing.Store(true)
	failed := 0
	for range 40 {
		if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatal(err)
			}
			failed++
		}
	}
	// Three failures open the failing replica's circuit; every call after them
	// goes to the other replica, but for a probe of the failing one after each sleep.
	if probes := b.Stats().Probes; failed != 3+int(probes) {
		t.Fatalf("%d calls failed, want 3 (the consecutive failures that open the replica's circuit) + %d probes", failed, probes)
	}
	badName := target + "@" + badAddr
	if c, ok := b.Circuit(badName); !ok || c.State != breaker.Open {
		t.Fatalf("circuit %s: %+v (found %v), want open", badName, c, ok)
	}
	if st := b.State(target); st != breaker.Closed {
		t.Fatalf("the target's circuit is %v: the replica's failures counted for the whole service", st)
	}
	if st := b.State(target + "@" + goodAddr); st != breaker.Closed {
		t.Fatalf("healthy replica's circuit is %v", st)
	}
	mu.Lock()
	if len(events) == 0 || events[0].Target != badName || events[0].To != breaker.Open {
		t.Fatalf("events %+v, want first: %s opened", events, badName)
	}
	for _, e := range events {
		if e.Target != badName {
			t.Fatalf("event %+v of another circuit than %s", e, badName)
		}
	}
	mu.Unlock()

	// After the sleep a call probes the replica again, and, healed, it closes.
	bad.failing.Store(false)
	hits := bad.hits.Load()
	for b.State(badName) != breaker.Closed {
		time.Sleep(10 * time.Millisecond)
		if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if bad.hits.Load() == hits {
		t.Fatal("closed without a probe reaching the replica")
	}
}

func TestEveryEndpointOpenFailsFast(t *testing.T) {
	b := breaker.New(breaker.WithConsecutiveFailures(2), breaker.WithOpenFor(time.Hour))
	one, two := &grpcBackend{}, &grpcBackend{}
	client, target := dialEndpoints(t, b, listenGRPC(t, one), listenGRPC(t, two))
	untilBoth(t, client, one, two)
	one.failing.Store(true)
	two.failing.Store(true)
	ctx := context.Background()
	for range 4 {
		if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}); status.Code(err) != codes.Unavailable || errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("while the circuits open: %v", err)
		}
	}
	hits := one.hits.Load() + two.hits.Load()
	_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
	var oe *breaker.OpenError
	if !errors.As(err, &oe) || status.Code(err) != codes.Unavailable {
		t.Fatalf("every endpoint open: %v, want the breaker's refusal", err)
	}
	if ms, ok := pushback.Of(err); !ok || ms == "0" {
		t.Fatalf("refusal's pushback %q (%v), want the time until the next probe", ms, ok)
	}
	if got := one.hits.Load() + two.hits.Load(); got != hits {
		t.Fatalf("a refused call reached a replica (%d hits, then %d)", hits, got)
	}
	if st := b.State(target); st != breaker.Closed {
		t.Fatalf("target circuit %v", st)
	}
}

func TestOneEndpointKeepsTheTargetCircuit(t *testing.T) {
	b := breaker.New(breaker.WithConsecutiveFailures(2), breaker.WithOpenFor(time.Hour))
	s := &grpcBackend{}
	client, target := dialEndpoints(t, b, listenGRPC(t, s))
	s.failing.Store(true)
	for range 2 {
		client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{})
	}
	if st := b.State(target); st != breaker.Open {
		t.Fatalf("single endpoint: target circuit %v, want open", st)
	}
	if n := b.Stats().Targets; n != 1 {
		t.Fatalf("%d circuits, want the target's alone", n)
	}
}

func TestEndpointStreamsCount(t *testing.T) {
	b := breaker.New(breaker.WithConsecutiveFailures(2), breaker.WithOpenFor(time.Hour))
	good, bad := &grpcBackend{}, &grpcBackend{}
	goodAddr, badAddr := listenGRPC(t, good), listenGRPC(t, bad)
	client, target := dialEndpoints(t, b, goodAddr, badAddr)
	untilBoth(t, client, good, bad)
	bad.failing.Store(true)
	failed := 0
	for range 20 {
		st, err := client.StreamingOutputCall(context.Background(), &testgrpc.StreamingOutputCallRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err = st.Recv(); err != nil {
				break
			}
		}
		if status.Code(err) == codes.Unavailable {
			failed++
		}
	}
	if failed != 2 || b.State(target+"@"+badAddr) != breaker.Open || b.State(target) != breaker.Closed {
		t.Fatalf("%d streams failed, replica circuit %v, target circuit %v; want 2, open, closed",
			failed, b.State(target+"@"+badAddr), b.State(target))
	}
}
