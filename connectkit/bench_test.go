package connectkit_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/pairbench"
)

// BenchmarkStack measures the time deadlinekit's whole stack adds to one loopback
// unary call, each call with the stack paired with the same call without it
// (pairbench), in one run: on connect-go ([connectkit.ClientOption] on the client,
// [connectkit.HandlerOption] on the handler) for each of its protocols, and on
// grpc-go ([deadlinekit.DialOptions], [deadlinekit.ServerOptions]) beside it.
// Untraced. Every call has a budget of 1 s, with and without the stack, so that the
// deadline is on the wire in both.
//
//	go test -run '^$' -bench Stack -benchtime 20000x -count 5 ./connectkit
//
// The sub-benchmarks:
//
//   - connect/connect, connect/grpc, connect/grpcweb: a connect.NewUnaryHandler of
//     wrapperspb.StringValue, its procedure declared NO_SIDE_EFFECTS
//     (connect.WithIdempotency) on the client and the handler, over an httptest
//     server speaking unencrypted HTTP/2 (h2c, prior knowledge: no TLS, as grpc-go's
//     insecure credentials), one server and client for the bare call and one for the
//     call with the stack;
//   - connect/grpc-undeclared: connect/grpc with the procedure declaring nothing;
//   - grpc/undeclared: grpc-go's interop TestService's UnaryCall (declared nothing:
//     no idempotency_level), as the root package's BenchmarkStack calls it, but
//     through DialOptions and ServerOptions whole;
//   - grpc/idempotent: grpc/undeclared with the method declared idempotent
//     (deadlinekit.WithIdempotentMethods), the counterpart of connect/grpc.
//
// Which path each layer takes: propagate (both sides), retry's server side,
// shortcircuit and the breaker do the same work in every variant. The retry layer
// runs its loop for one attempt in every variant (a call's idempotency is read only
// when an attempt fails). The hedging layer differs: for a declared procedure
// (connect/connect, connect/grpc, connect/grpcweb, grpc/idempotent) it plans each
// call (the latency window's p99 as the delay, the extra-load account), arms a timer
// and sends the primary as a copy of its own, cancelling the timer when it answers
// (a call slower than the p99 gets a hedge: hedges-% counts them); for an
// undeclared one (connect/grpc-undeclared, grpc/undeclared) it sends the call once,
// unplanned. On connect-go each of the four client layers (retry, breaker, hedge,
// propagate) also copies the request, header included, for each attempt it sends
// (connectkit's attempt), which grpc-go's interceptors do not. Compare connect/grpc
// with grpc/idempotent, and connect/grpc-undeclared with grpc/undeclared.
//
// bare-allocs and with-allocs are one call's allocations, both ends
// (testing.AllocsPerRun); allocs/op is a pair's.
func BenchmarkStack(b *testing.B) {
	b.Run("connect", func(b *testing.B) {
		for _, p := range []struct {
			name  string
			opt   connect.ClientOption
			level connect.IdempotencyLevel
		}{
			{"connect", connect.WithClientOptions(), connect.IdempotencyNoSideEffects},
			{"grpc", connect.WithGRPC(), connect.IdempotencyNoSideEffects},
			{"grpcweb", connect.WithGRPCWeb(), connect.IdempotencyNoSideEffects},
			{"grpc-undeclared", connect.WithGRPC(), connect.IdempotencyUnknown},
		} {
			b.Run(p.name, func(b *testing.B) {
				h := benchHedger()
				bare := connectCall(b, p.level, nil, []connect.ClientOption{p.opt})
				with := connectCall(b, p.level,
					[]connect.HandlerOption{connectkit.HandlerOption()},
					[]connect.ClientOption{p.opt, connectkit.ClientOption(deadlinekit.WithSharedHedger(h))})
				pair(b, bare, with, h)
			})
		}
	})
	b.Run("grpc", func(b *testing.B) {
		for _, v := range []struct {
			name       string
			idempotent bool
		}{{"undeclared", false}, {"idempotent", true}} {
			b.Run(v.name, func(b *testing.B) {
				var opts []deadlinekit.Option
				var hopts []hedge.Option
				if v.idempotent {
					opts = append(opts, deadlinekit.WithIdempotentMethods(grpcMethod))
					hopts = append(hopts, hedge.WithIdempotentMethods(grpcMethod))
				}
				h := benchHedger(hopts...)
				bare := grpcCall(b, nil, nil)
				with := grpcCall(b, deadlinekit.ServerOptions(opts...), deadlinekit.DialOptions(append(opts, deadlinekit.WithSharedHedger(h))...))
				pair(b, bare, with, h)
			})
		}
	})
}

// benchHedger returns the Hedger the stack would make for itself (the stack's hedge
// floor, the default percentile and cap), with opts after, shared with the stack
// ([deadlinekit.WithSharedHedger]) only so that its Stats can be read.
func benchHedger(opts ...hedge.Option) *hedge.Hedger {
	return hedge.New(append([]hedge.Option{hedge.WithFloor(deadline.MinFloor + deadlinekit.DefaultReserve)}, opts...)...)
}

// pair measures with against bare (pairbench), and reports each call's allocations
// and the share of the calls with the stack that h hedged.
func pair(b *testing.B, bare, with func() error, h *hedge.Hedger) {
	allocs := func(f func() error) float64 {
		return testing.AllocsPerRun(200, func() {
			if err := f(); err != nil {
				b.Fatal(err)
			}
		})
	}
	bareAllocs, withAllocs := allocs(bare), allocs(with)
	var calls atomic.Int64
	counted := func() error { calls.Add(1); return with() }
	before := h.Stats().Hedges
	b.ReportAllocs()
	pairbench.Run(b, bare, counted)
	b.ReportMetric(bareAllocs, "bare-allocs")
	b.ReportMetric(withAllocs, "with-allocs")
	if n := calls.Load(); n > 0 {
		b.ReportMetric(100*float64(h.Stats().Hedges-before)/float64(n), "hedges-%")
	}
}

// budget is every benchmark call's: a real caller's call has a deadline.
const budget = time.Second

const (
	connectProc = "/bench.Echo/Get"
	grpcMethod  = "/grpc.testing.TestService/UnaryCall"
)

// connectCall starts a loopback h2c server with one unary procedure of idempotency
// level, handled with the options hopts, and a client of it with the options copts
// (a protocol, the stack), and returns one call.
func connectCall(b *testing.B, level connect.IdempotencyLevel, hopts []connect.HandlerOption, copts []connect.ClientOption) func() error {
	mux := http.NewServeMux()
	mux.Handle(connectProc, connect.NewUnaryHandler(connectProc,
		func(context.Context, *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			return connect.NewResponse(wrapperspb.String("ok")), nil
		}, append(hopts, connect.WithIdempotency(level))...))
	srv := httptest.NewUnstartedServer(mux)
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &protocols
	srv.Start()
	b.Cleanup(srv.Close)
	tr := &http.Transport{Protocols: &protocols}
	b.Cleanup(tr.CloseIdleConnections)
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](&http.Client{Transport: tr}, srv.URL+connectProc,
		append(copts, connect.WithIdempotency(level))...)
	msg := wrapperspb.String("ping")
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		_, err := client.CallUnary(ctx, connect.NewRequest(msg))
		return err
	}
}

type okService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (okService) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{}, nil
}

// grpcCall starts a loopback grpc-go server with the options sopts and a client of
// it with the options copts (insecure credentials added), and returns one call of
// TestService's UnaryCall.
func grpcCall(b *testing.B, sopts []grpc.ServerOption, copts []grpc.DialOption) func() error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer(sopts...)
	testgrpc.RegisterTestServiceServer(gs, okService{})
	go gs.Serve(lis)
	b.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), append(copts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	client := testgrpc.NewTestServiceClient(conn)
	req := &testgrpc.SimpleRequest{}
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		_, err := client.UnaryCall(ctx, req)
		return err
	}
}
