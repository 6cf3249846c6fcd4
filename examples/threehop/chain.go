package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/propagate"
)

type mode int

const (
	modeIndependent mode = iota // per-hop timeouts, nothing propagated
	modePropagated              // deadlinekit's propagate on every hop
)

// hopRecord is what one service recorded about the request it served.
type hopRecord struct {
	name      string
	received  time.Time
	budget    time.Duration // time left on arrival; 0 when no deadline came
	hasBudget bool
	workEnd   time.Time
	leftAtEnd time.Duration
	cancelled bool
}

// describe says how the hop's work ended, on the client's time axis, and with what
// budget left when the hop works under the client's deadline.
func (h hopRecord) describe(start time.Time, m mode) string {
	at := "+" + ms(h.workEnd.Sub(start))
	switch {
	case h.cancelled:
		return "cancelled at " + at
	case m == modePropagated:
		return fmt.Sprintf("done at %s, %s left", at, ms(h.leftAtEnd))
	default:
		return "done at " + at
	}
}

type result struct {
	title  string
	mode   mode
	start  time.Time
	hops   [3]hopRecord
	wasted time.Duration // C's work after the client gave up
}

// recorder collects the hops' records; the services write to it as they go.
type recorder struct {
	mu    sync.Mutex
	start time.Time
	hops  map[string]hopRecord
	done  chan struct{} // closed when C has recorded
	log   io.Writer
}

func (r *recorder) record(h hopRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hops[h.name] = h
	end := "finished"
	if h.cancelled {
		end = "cancelled"
	}
	budget := "none"
	if h.hasBudget {
		budget = msPrecise(h.budget)
	}
	fmt.Fprintf(r.log, "  %s: received at +%s with budget %s, work %s at +%s\n",
		h.name, msPrecise(h.received.Sub(r.start)), budget, end, msPrecise(h.workEnd.Sub(r.start)))
	if h.name == "C" {
		close(r.done)
	}
}

// work does a hop's 100 ms of work, stopping early if ctx ends. It records the hop.
func (r *recorder) work(ctx context.Context, name string) error {
	h := hopRecord{name: name, received: time.Now()}
	h.budget, h.hasBudget = deadline.Remaining(ctx)
	t := time.NewTimer(hopWork)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		h.cancelled = true
	}
	h.workEnd = time.Now()
	h.leftAtEnd, _ = deadline.Remaining(ctx)
	r.record(h)
	if h.cancelled {
		return ctx.Err()
	}
	return nil
}

// hopContext is the context a hop works under: in the independent scenario a fresh
// 300 ms timeout that ignores the caller (the anti-pattern), otherwise the request's.
func hopContext(m mode, req context.Context) (context.Context, context.CancelFunc) {
	if m == modeIndependent {
		return context.WithTimeout(context.Background(), ownTimeout)
	}
	return req, func() {}
}

// hopService is B's gRPC service, registered by hand so the demo needs no generated
// code: /threehop.Hop/Work takes and returns google.protobuf.Empty.
var hopService = grpc.ServiceDesc{
	ServiceName: "threehop.Hop",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Work",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := srv.(func(context.Context) error)
			call := func(ctx context.Context, _ any) (any, error) { return new(emptypb.Empty), h(ctx) }
			if interceptor == nil {
				return call(ctx, in)
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/threehop.Hop/Work"}, call)
		},
	}},
}

// runChain starts A, B and C on loopback, sends one request under the client budget,
// waits for C to record how its work ended, and stops everything.
func runChain(m mode, log io.Writer) (result, error) {
	rec := &recorder{hops: map[string]hopRecord{}, done: make(chan struct{}), log: log}
	var stop []func()
	defer func() {
		for i := len(stop) - 1; i >= 0; i-- {
			stop[i]()
		}
	}()

	// The toolkit's pieces, or the plain ones.
	httpServer := func(h http.Handler) http.Handler { return h }
	var outbound http.RoundTripper = http.DefaultTransport.(*http.Transport).Clone()
	var grpcServerOpts []grpc.ServerOption
	grpcDialOpts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if m == modePropagated {
		httpServer = propagate.NewMiddleware()
		outbound = propagate.NewTransport(outbound)
		grpcServerOpts = append(grpcServerOpts, grpc.UnaryInterceptor(propagate.UnaryServerInterceptor()))
		grpcDialOpts = append(grpcDialOpts, grpc.WithUnaryInterceptor(propagate.UnaryClientInterceptor()))
	}
	client := &http.Client{Transport: outbound}
	stop = append(stop, client.CloseIdleConnections)

	// C: HTTP, work only.
	cURL, stopC, err := serveHTTP(httpServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := hopContext(m, r.Context())
		defer cancel()
		if err := rec.work(ctx, "C"); err != nil {
			http.Error(w, err.Error(), http.StatusGatewayTimeout)
		}
	})))
	if err != nil {
		return result{}, err
	}
	stop = append(stop, stopC)

	// B: gRPC, works then calls C.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return result{}, err
	}
	gs := grpc.NewServer(grpcServerOpts...)
	gs.RegisterService(&hopService, func(reqCtx context.Context) error {
		ctx, cancel := hopContext(m, reqCtx)
		defer cancel()
		if err := rec.work(ctx, "B"); err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cURL, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	go gs.Serve(lis)
	stop = append(stop, gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpcDialOpts...)
	if err != nil {
		return result{}, err
	}
	stop = append(stop, func() { conn.Close() })

	// A: HTTP, works then calls B.
	aURL, stopA, err := serveHTTP(httpServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := hopContext(m, r.Context())
		defer cancel()
		if err := rec.work(ctx, "A"); err != nil {
			http.Error(w, err.Error(), http.StatusGatewayTimeout)
			return
		}
		if err := conn.Invoke(ctx, "/threehop.Hop/Work", new(emptypb.Empty), new(emptypb.Empty)); err != nil {
			http.Error(w, err.Error(), http.StatusGatewayTimeout)
		}
	})))
	if err != nil {
		return result{}, err
	}
	stop = append(stop, stopA)

	// Warm the connections, so that the measured request pays no dial.
	conn.Connect()

	// The client.
	rec.start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), clientBudget)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, aURL, nil)
	if err != nil {
		return result{}, err
	}
	resp, err := client.Do(req)
	if err == nil {
		resp.Body.Close()
	} else if !errors.Is(err, context.DeadlineExceeded) {
		return result{}, fmt.Errorf("client: %w", err)
	}
	gaveUp, _ := ctx.Deadline()
	fmt.Fprintf(log, "  client: gave up at +%s\n", msPrecise(gaveUp.Sub(rec.start)))

	select {
	case <-rec.done:
	case <-time.After(2 * time.Second):
		return result{}, errors.New("hop C never recorded its work")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	res := result{mode: m, start: rec.start}
	for i, name := range []string{"A", "B", "C"} {
		h, ok := rec.hops[name]
		if !ok {
			return result{}, fmt.Errorf("hop %s never ran", name)
		}
		res.hops[i] = h
	}
	res.wasted = max(res.hops[2].workEnd.Sub(gaveUp), 0)
	return res, nil
}

func serveHTTP(h http.Handler) (url string, stop func(), err error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(lis)
	return "http://" + lis.Addr().String(), func() { srv.Close() }, nil
}
