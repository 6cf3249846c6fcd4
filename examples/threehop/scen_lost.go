package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/dedup/redisstore"
	"github.com/deadlinekit/deadlinekit/retry"
)

// The "answer was lost" scenario: the client POSTs a payment to A (HTTP), A calls
// B's Charge (gRPC), and B writes the charge into C's ledger (HTTP). B's answer to A
// is cut once, after B ran: A's retry layer sends the call again with the same
// idempotency key, as it should. Without dedup on B, B runs again and C records a
// second charge; with deadlinekit.WithDedup on B, the repeat gets B's stored answer,
// and C records one. THREEHOP_REDIS=host:port runs B's dedup on that Redis
// (redisstore) instead of in memory.
const lostPayments = 3

const chargeMethod = "/threehop.Payments/Charge"

// paymentsService is B's gRPC service, registered by hand: Charge takes and returns a
// google.protobuf.StringValue (registered, so that dedup can store and replay it).
var paymentsService = grpc.ServiceDesc{
	ServiceName: "threehop.Payments",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Charge",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := srv.(func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error))
			call := func(ctx context.Context, req any) (any, error) { return h(ctx, req.(*wrapperspb.StringValue)) }
			if interceptor == nil {
				return call(ctx, in)
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: chargeMethod}, call)
		},
	}},
}

func runLost(e *env) ([]reading, error) {
	var res [2]lostResult
	for i, withDedup := range []bool{false, true} {
		r, err := runLostOnce(e, withDedup)
		if err != nil {
			return nil, err
		}
		res[i] = r
	}
	return []reading{
		{"the answer was lost", fmt.Sprintf("charges C recorded for %d payments (each answer cut once)", lostPayments),
			fmt.Sprint(res[0].charges), fmt.Sprint(res[1].charges)},
		{"", "what the client got for the first payment", res[0].first, res[1].first},
	}, nil
}

type lostResult struct {
	charges int64
	first   string
}

func lostStore() (dedup.Store, func(), error) {
	addr := os.Getenv("THREEHOP_REDIS")
	if addr == "" {
		return dedup.NewMemoryStore(), func() {}, nil
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, nil, fmt.Errorf("THREEHOP_REDIS=%s: %w", addr, err)
	}
	// A prefix of its own per run, so that a second run does not replay the first's.
	prefix := fmt.Sprintf("threehop:%d:", time.Now().UnixNano())
	return redisstore.New(rdb, redisstore.WithPrefix(prefix)), func() { rdb.Close() }, nil
}

func runLostOnce(e *env, withDedup bool) (lostResult, error) {
	var res lostResult
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	// C: the ledger.
	var charges atomic.Int64
	cURL, stop, err := serveHTTP(e.tel.serverHandler(svcC, deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		n := charges.Add(1)
		fmt.Fprintf(w, "charge %d", n)
	}))))
	if err != nil {
		return res, err
	}
	stops = append(stops, stop)

	// B: payments, gRPC; writes to C with the payment's key.
	bToC := &http.Client{Transport: e.tel.transport(svcB, deadlinekit.NewTransport(nil))}
	var sopts []deadlinekit.Option
	if withDedup {
		store, closeStore, err := lostStore()
		if err != nil {
			return res, err
		}
		stops = append(stops, closeStore)
		sopts = append(sopts, deadlinekit.WithDedup(store))
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	gs := grpc.NewServer(append(e.tel.grpcServerOptions(svcB), deadlinekit.ServerOptions(sopts...)...)...)
	gs.RegisterService(&paymentsService, func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, cURL+"/charges", strings.NewReader(in.GetValue()))
		resp, err := bToC.Do(req)
		if err != nil {
			return nil, deadlinekit.GRPCError(ctx, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Fprintf(e.verbose, "  lost (dedup %v): B ran the charge: C answered %q\n", withDedup, b)
		return wrapperspb.String(string(b)), nil
	})
	go gs.Serve(lis)
	stops = append(stops, gs.Stop)

	// A: the gateway; its answer from B is cut once per payment, after B ran.
	var cut atomic.Int64
	cutter := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if md, _ := metadata.FromOutgoingContext(ctx); err == nil && len(md.Get("grpc-previous-rpc-attempts")) == 0 {
			cut.Add(1)
			return status.Error(codes.Unavailable, "connection reset: the answer was lost after B ran")
		}
		return err
	}
	conn, err := grpc.NewClient(lis.Addr().String(), append(append(e.tel.grpcDialOptions(svcA),
		deadlinekit.DialOptions(deadlinekit.WithRetry(retry.WithIdempotencyKeys(nil)))...),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithChainUnaryInterceptor(cutter))...)
	if err != nil {
		return res, err
	}
	stops = append(stops, func() { conn.Close() })
	aURL, stop, err := serveHTTP(e.tel.serverHandler(svcA, deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ctx := r.Context()
		if k := r.Header.Get("Idempotency-Key"); k != "" { // the client's key goes on
			ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", k)
		}
		out := new(wrapperspb.StringValue)
		if err := conn.Invoke(ctx, chargeMethod, wrapperspb.String(string(body)), out); err != nil {
			deadlinekit.WriteHTTPError(w, err)
			return
		}
		fmt.Fprint(w, out.GetValue())
	}))))
	if err != nil {
		return res, err
	}
	stops = append(stops, stop)

	client := &http.Client{Transport: e.tel.transport(svcClient, deadlinekit.NewTransport(nil, deadlinekit.WithRetry(retry.WithIdempotencyKeys(nil))))}
	variant := "without dedup"
	if withDedup {
		variant = "with deadlinekit.WithDedup on B"
	}
	for i := range lostPayments {
		ctx, root := e.tel.root(context.Background(), "the answer was lost, "+variant)
		if i == 0 {
			e.trace("lost: "+variant, root)
		}
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		before := charges.Load()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, aURL+"/pay", strings.NewReader(fmt.Sprintf(`{"payment":%d,"amount":100}`, i+1)))
		resp, err := client.Do(req)
		var got string
		if err != nil {
			got = err.Error()
		} else {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got = fmt.Sprintf("%d %s", resp.StatusCode, b)
		}
		cancel()
		recorded := charges.Load() - before
		root.SetName(fmt.Sprintf("the answer was lost, %s: %d %s recorded, the client got %q", variant, recorded, plural(recorded, "charge", "charges"), got))
		root.End()
		fmt.Fprintf(e.verbose, "  lost (dedup %v): payment %d: C recorded %d, client got %q\n", withDedup, i+1, recorded, got)
		if i == 0 {
			res.first = got
		}
	}
	if cut.Load() != lostPayments {
		return res, fmt.Errorf("lost: %d answers cut, want %d", cut.Load(), lostPayments)
	}
	res.charges = charges.Load()
	return res, nil
}
