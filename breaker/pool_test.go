package breaker_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/runtime/protoiface"

	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/hedge"
)

// gate holds the next hedge of a call as it readies its reply (the reply type's New,
// which hedge calls before it copies the call's options), until opened.
type gate struct {
	mu      sync.Mutex
	armed   bool
	waiting chan struct{} // closed when a hedge waits
	open    chan struct{}
}

func (g *gate) arm() {
	g.mu.Lock()
	g.armed, g.waiting, g.open = true, make(chan struct{}), make(chan struct{})
	g.mu.Unlock()
}

func (g *gate) pass() {
	g.mu.Lock()
	armed, waiting, open := g.armed, g.waiting, g.open
	g.armed = false
	g.mu.Unlock()
	if armed {
		close(waiting)
		<-open
	}
}

// gatedReply is a SimpleResponse whose message type's New passes its gate.
type gatedReply struct {
	*testgrpc.SimpleResponse
	g *gate
}

func (r *gatedReply) ProtoReflect() protoreflect.Message {
	return gatedMessage{r.SimpleResponse.ProtoReflect(), r.g}
}

type gatedMessage struct {
	protoreflect.Message
	g *gate
}

func (m gatedMessage) Type() protoreflect.MessageType { return gatedType{m.Message.Type(), m.g} }

// ProtoMethods: none, so that the proto runtime takes the reflective path, which
// goes through the wrapper.
func (gatedMessage) ProtoMethods() *protoiface.Methods { return nil }

type gatedType struct {
	protoreflect.MessageType
	g *gate
}

func (t gatedType) New() protoreflect.Message {
	t.g.pass()
	return t.MessageType.New()
}

// callID is a per-call option naming its call, as a user's interceptor beneath
// reads its own options (go-grpc-middleware's do).
type callID struct {
	grpc.EmptyCallOption
	id string
}

type idKey struct{}

// holdingBackend answers at once, except a request with ResponseSize 1, which waits
// for release.
type holdingBackend struct {
	testgrpc.UnimplementedTestServiceServer
	release chan struct{}
}

func (s *holdingBackend) UnaryCall(ctx context.Context, in *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if in.GetResponseSize() == 1 {
		select {
		case <-s.release:
		case <-ctx.Done():
		}
	}
	return &testgrpc.SimpleResponse{}, nil
}

// Nothing the breaker hands the hedging layer beneath it is reused while the call
// may still run: a hedge that starts as its call returns (the primary won) goes out
// with its own call's options, never with those of the next call.
func TestHedgeBeneathGetsItsOwnCallOptions(t *testing.T) {
	const method = "/grpc.testing.TestService/UnaryCall"
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	backend := &holdingBackend{}
	gs := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(gs, backend)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)

	var mu sync.Mutex
	var mismatches []string
	var hedgeSeen chan struct{}
	var g gate
	// observe, beneath the hedging layer, compares each copy's options with the
	// call its context belongs to. The primary of the second call of a round holds
	// until the first call's hedge has gone by.
	observe := func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		id, _ := ctx.Value(idKey{}).(string)
		hedged := len(metadata.ValueFromOutgoingContext(ctx, "grpc-previous-rpc-attempts")) > 0
		for _, o := range opts {
			if c, ok := o.(callID); ok && c.id != id {
				mu.Lock()
				mismatches = append(mismatches, "a copy of call "+id+" went out with the options of call "+c.id)
				mu.Unlock()
			}
		}
		switch {
		case hedged && id[0] == 'A':
			close(hedgeSeen)
		case !hedged && id[0] == 'B':
			close(g.open)
			// A's hedge, started as A returned, may find its call over and not go
			// out at all on a loaded machine: then this round shows nothing, but
			// it must not hang.
			select {
			case <-hedgeSeen:
			case <-time.After(5 * time.Second):
			}
		}
		return invoker(ctx, m, req, reply, cc, opts...)
	}
	h := hedge.New(hedge.WithIdempotentMethods(method), hedge.WithMaxExtraLoad(1),
		hedge.WithDelay(hedge.Delay{Initial: time.Millisecond, MinSamples: 1 << 30}))
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(breaker.New().UnaryClientInterceptor(), h.UnaryClientInterceptor(), observe))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	for round := range 10 {
		a, b := "A"+string(rune('0'+round)), "B"+string(rune('0'+round))
		backend.release = make(chan struct{})
		hedgeSeen = make(chan struct{})
		g.arm()
		done := make(chan error, 1)
		go func() {
			// The two calls run one after the other on one goroutine, as a
			// caller's do.
			ctx := context.WithValue(context.Background(), idKey{}, a)
			err := cc.Invoke(ctx, method, &testgrpc.SimpleRequest{ResponseSize: 1}, &gatedReply{new(testgrpc.SimpleResponse), &g}, callID{id: a})
			if err == nil {
				ctx = context.WithValue(context.Background(), idKey{}, b)
				err = cc.Invoke(ctx, method, &testgrpc.SimpleRequest{}, &gatedReply{new(testgrpc.SimpleResponse), &g}, callID{id: b})
			}
			done <- err
		}()
		select {
		case <-g.waiting: // call A's hedge is on its way
		case err := <-done:
			t.Fatalf("round %d: the calls returned (%v) without a hedge", round, err)
		}
		close(backend.release) // A's primary answers and wins
		if err := <-done; err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, m := range mismatches {
		t.Error(m)
	}
}
