// Package retrycmp compares retry layers side by side in one outage: a 3-layer gRPC
// chain on loopback (user client → layer 1 → layer 2 → bottom service) whose bottom
// service answers UNAVAILABLE, with the same retry library on every arrow. The
// contenders are a hand-written "retry 3 times at once", deadlinekit's retry package
// (client interceptor on every arrow, server interceptor on the middle layers),
// go-grpc-middleware's retry interceptor and failsafe-go's retry policy through its
// failsafegrpc adapter. cmd/retrybench runs it and prints markdown tables.
//
// The services are grpc-go's interop TestService (UnaryCall); the middle layers relay
// the request as is, under the context of the inbound call, so grpc-go carries the
// deadline down the chain for every variant. The request's payload carries the user
// request's number, so the bottom counts the calls of each user request exactly.
//
// Everything talks to 127.0.0.1 only; every run is bounded in requests and in time.
package retrycmp

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// bottom is the service at the end of the chain. It counts the calls it receives per
// user request and answers UNAVAILABLE while down.
type bottom struct {
	testgrpc.UnimplementedTestServiceServer
	down atomic.Bool

	mu   sync.Mutex
	hits map[int]int // calls received, by user request number
}

func (b *bottom) UnaryCall(_ context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	id := requestID(req)
	b.mu.Lock()
	b.hits[id]++
	b.mu.Unlock()
	if b.down.Load() {
		return nil, status.Error(codes.Unavailable, "bottom service down")
	}
	return &testgrpc.SimpleResponse{}, nil
}

// calls returns the calls received for user request id.
func (b *bottom) calls(id int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits[id]
}

// relay is a middle layer: it passes the request on under its own inbound context.
type relay struct {
	testgrpc.UnimplementedTestServiceServer
	next testgrpc.TestServiceClient
}

func (r *relay) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return r.next.UnaryCall(ctx, req)
}

func newRequest(id int) *testgrpc.SimpleRequest {
	return &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: strconv.AppendInt(nil, int64(id), 10)}}
}

func requestID(req *testgrpc.SimpleRequest) int {
	id, err := strconv.Atoi(string(req.GetPayload().GetBody()))
	if err != nil {
		return -1 << 30
	}
	return id
}

// chain is user → L1 → L2 → bottom, every arrow through v's client interceptor.
type chain struct {
	bottom  *bottom
	user    testgrpc.TestServiceClient
	closers []func()
}

func newChain(v Variant) (c *chain, err error) {
	c = &chain{bottom: &bottom{hits: map[int]int{}}}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	serve := func(impl testgrpc.TestServiceServer, middle bool) (string, error) {
		lis, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		var opts []grpc.ServerOption
		if middle && v.Server != nil {
			opts = append(opts, grpc.UnaryInterceptor(v.Server()))
		}
		s := grpc.NewServer(opts...)
		testgrpc.RegisterTestServiceServer(s, impl)
		go s.Serve(lis)
		c.closers = append(c.closers, s.Stop)
		return lis.Addr().String(), nil
	}
	dial := func(addr string) (testgrpc.TestServiceClient, error) {
		cc, err := grpc.NewClient("passthrough:///"+addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDisableRetry(), // grpc-go's own retries off: the variant is the only retry layer
			grpc.WithUnaryInterceptor(v.Client()))
		if err != nil {
			return nil, err
		}
		c.closers = append(c.closers, func() { cc.Close() })
		return testgrpc.NewTestServiceClient(cc), nil
	}
	addr, err := serve(c.bottom, false)
	if err != nil {
		return nil, err
	}
	for range 2 { // L2, then L1
		next, err := dial(addr)
		if err != nil {
			return nil, err
		}
		if addr, err = serve(&relay{next: next}, true); err != nil {
			return nil, err
		}
	}
	if c.user, err = dial(addr); err != nil {
		return nil, err
	}
	return c, nil
}

// close stops everything, the user's side first.
func (c *chain) close() {
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
}
