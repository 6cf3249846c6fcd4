package deadlinekit_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/hedge"
)

// replicaCalls is what a service's replicas know of the calls they were sent.
type replicaCalls struct {
	mu      sync.Mutex
	copies  map[int32][]string      // call → "replica:later" of its copies, in arrival order
	primary map[int32]chan struct{} // closed when the call's first copy has arrived
}

// arrived notes that a copy of call id came to the replica name, and returns the
// channel closed once the call's first copy has.
func (rc *replicaCalls) arrived(id int32, name string, later bool) chan struct{} {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.copies[id] = append(rc.copies[id], fmt.Sprintf("%s:%v", name, later))
	ch, ok := rc.primary[id]
	if !ok {
		ch = make(chan struct{})
		rc.primary[id] = ch
	}
	if !later {
		close(ch)
	}
	return ch
}

// replica serves as one of a service's replicas: while stalling, it holds a call's
// first copy until its caller leaves, and answers a later copy (a hedge) once the
// first has arrived, wherever it did; it notes which copy of which call (the
// request's ResponseSize) came to it.
type replica struct {
	testgrpc.UnimplementedTestServiceServer
	name  string
	stall *atomic.Bool
	calls *replicaCalls
	hits  atomic.Int64
}

func (r *replica) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	r.hits.Add(1)
	if !r.stall.Load() {
		return &testgrpc.SimpleResponse{Username: r.name}, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	later := len(md.Get("grpc-previous-rpc-attempts")) > 0
	primaryArrived := r.calls.arrived(req.ResponseSize, r.name, later)
	if later {
		select {
		case <-primaryArrived:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &testgrpc.SimpleResponse{Username: r.name}, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// A hedge goes to another replica than its call's first copy, where that copy is
// stuck: with two replicas round robin alone sent about half of the hedges of
// concurrent calls back to the replica their primary was waiting on (a trial of
// the README's setup: 16 of 31 hedges).
func TestHedgeGoesToAnotherReplica(t *testing.T) {
	var stall atomic.Bool
	calls := &replicaCalls{copies: map[int32][]string{}, primary: map[int32]chan struct{}{}}
	var eps []resolver.Endpoint
	var replicas []*replica
	for _, name := range []string{"a", "b"} {
		r := &replica{name: name, stall: &stall, calls: calls}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gs := grpc.NewServer(deadlinekit.ServerOptions()...)
		testgrpc.RegisterTestServiceServer(gs, r)
		go gs.Serve(lis)
		t.Cleanup(gs.Stop)
		eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{{Addr: lis.Addr().String()}}})
		replicas = append(replicas, r)
	}
	res := manual.NewBuilderWithScheme("dkt")
	res.InitialState(resolver.State{Endpoints: eps})
	// Every call is hedged 1 ms after it is sent, and nothing caps the hedges.
	conn, err := grpc.NewClient("dkt:///catalog", append(deadlinekit.DialOptions(
		deadlinekit.WithIdempotentMethods(stackMethod),
		deadlinekit.WithHedge(hedge.WithDelay(hedge.Delay{Initial: time.Millisecond, MinSamples: 1 << 30}), hedge.WithMaxExtraLoad(1))),
		grpc.WithResolvers(res), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := testgrpc.NewTestServiceClient(conn)
	call := func(id int32) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: id})
		return err
	}
	// Until both replicas have answered: both connections are ready.
	for id := int32(-1); replicas[0].hits.Load() == 0 || replicas[1].hits.Load() == 0; id-- {
		if err := call(id); err != nil {
			t.Fatal(err)
		}
	}
	stall.Store(true)
	const n, together = 48, 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for k := range together {
		wg.Go(func() {
			for id := int32(k); id < n; id += together {
				if err := call(id); err != nil {
					errs <- fmt.Errorf("call %d: %w", id, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	calls.mu.Lock()
	defer calls.mu.Unlock()
	for id := range int32(n) {
		c := calls.copies[id]
		if len(c) != 2 || c[0][:1] == c[1][:1] {
			t.Errorf("call %d: copies at %v; want its primary and its hedge at different replicas", id, c)
		}
	}
}
