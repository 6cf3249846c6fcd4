package exactlyonce_test

import (
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/retry"
)

// Parameters of the servers' deduplication.
const (
	maxResponse = 16 << 10
	leaseMargin = 300 * time.Millisecond
	replicas    = 3
)

// cluster is the replicas of one service, HTTP, gRPC and connect, sharing one
// store, and the clients that call them.
type cluster struct {
	h     *history
	store *faultStore
	hosts []string // HTTP replicas' host:port
	addrs []string // gRPC replicas' host:port
	conns []string // connect replicas' host:port

	stackHTTP *http.Client
	rawHTTP   *http.Client
	stackGRPC testgrpc.TestServiceClient
	rawGRPC   testgrpc.TestServiceClient
	// stackConnect and rawConnect are by protocol (wires); rawConnect, per replica.
	stackConnect map[string]*connectClient
	rawConnect   map[string][]*connectClient

	closers []func()
}

var schemes atomic.Int64

// startCluster starts the replicas on store and the clients; t's cleanup stops them.
// The connect replicas use connectStore(the store) (a meta-test breaks it there
// alone; nil: the store itself).
func startCluster(t testing.TB, h *history, store dedup.Store, seed uint64, rate float64, connectStore func(dedup.Store) dedup.Store) *cluster {
	c := &cluster{h: h, store: newFaultStore(store, h, seed, rate, leaseMargin)}
	cstore := dedup.Store(c.store)
	if connectStore != nil {
		cstore = connectStore(c.store)
	}
	for i := range replicas {
		hl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c.hosts = append(c.hosts, hl.Addr().String())
		c.addrs = append(c.addrs, gl.Addr().String())
		cl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c.conns = append(c.conns, cl.Addr().String())
		c.closers = append(c.closers, serveReplica(h, c.store, strconv.Itoa(i), hl, gl)...)
		c.closers = append(c.closers, serveConnect(h, cstore, strconv.Itoa(i), cl))
	}
	c.clients(t, seed, rate)
	t.Cleanup(c.close)
	return c
}

// serveReplica serves replica i's HTTP and gRPC servers on hl and gl, with dedup on
// store, and returns what stops them.
func serveReplica(h recorder, store dedup.Store, i string, hl, gl net.Listener) []func() {
	dopts := []dedup.Option{dedup.WithScope(tenantOf), dedup.WithMaxResponseSize(maxResponse), dedup.WithLeaseMargin(leaseMargin)}
	svc := &service{h: h, replica: "http-" + i}
	srv := &httptest.Server{Listener: hl, Config: &http.Server{
		Handler:  faultHandler(deadlinekit.NewHandler(svc, deadlinekit.WithDedup(store, dopts...))),
		ErrorLog: log.New(io.Discard, "", 0),
	}}
	srv.Start()

	cl := &conns{Listener: gl, m: map[string]net.Conn{}}
	gs := grpc.NewServer(append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(serverFaults(cl))},
		deadlinekit.ServerOptions(deadlinekit.WithDedup(store, dopts...))...)...)
	testgrpc.RegisterTestServiceServer(gs, &service{h: h, replica: "grpc-" + i})
	go func() { _ = gs.Serve(cl) }()
	return []func(){srv.Close, gs.GracefulStop}
}

// clients builds the stack's clients (retry with generated keys, hedging after a
// fixed 4 ms, faults beneath) and the raw ones, for the three protocols.
func (c *cluster) clients(t testing.TB, seed uint64, rate float64) {
	hedgeAfter := 4 * time.Millisecond
	stack := []deadlinekit.Option{
		deadlinekit.WithRetry(retry.WithIdempotencyKeys(nil), retry.WithMaxAttempts(4)),
		deadlinekit.WithHedge(hedge.WithDelay(hedge.Delay{Initial: hedgeAfter, Min: hedgeAfter, Max: hedgeAfter, MinSamples: 1 << 30}),
			hedge.WithMaxExtraLoad(0.5), hedge.WithKeyedWrites()),
	}
	stackTr := &http.Transport{MaxIdleConnsPerHost: 64}
	rawTr := &http.Transport{MaxIdleConnsPerHost: 64}
	c.stackHTTP = &http.Client{Transport: deadlinekit.NewTransport(&faultRT{name: "http", h: c.h, seed: seed, rate: rate, hosts: c.hosts, base: stackTr}, stack...)}
	c.rawHTTP = &http.Client{Transport: rawTr}
	c.closers = append(c.closers, stackTr.CloseIdleConnections, rawTr.CloseIdleConnections)

	dial := func(opts ...grpc.DialOption) testgrpc.TestServiceClient {
		r := manual.NewBuilderWithScheme("eo" + strconv.FormatInt(schemes.Add(1), 10))
		var as []resolver.Address
		for _, a := range c.addrs {
			as = append(as, resolver.Address{Addr: a})
		}
		r.InitialState(resolver.State{Addresses: as})
		cc, err := grpc.NewClient(r.Scheme()+":///svc", append([]grpc.DialOption{grpc.WithResolvers(r),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		c.closers = append(c.closers, func() { cc.Close() })
		return testgrpc.NewTestServiceClient(cc)
	}
	c.stackGRPC = dial(append(deadlinekit.DialOptions(stack...), grpc.WithChainUnaryInterceptor(faultInterceptor(c.h, seed, rate)))...)
	c.rawGRPC = dial()
	c.connectClients(stack, seed, rate)
}

func (c *cluster) close() {
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
	c.closers = nil
}
