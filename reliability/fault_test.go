package reliability_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
)

// The fault tests run the same scenarios over the HTTP stack (retry → hedge →
// propagate → net/http) and the gRPC stack (the same three interceptors). In each,
// callers make three kinds of calls in turn, each under its own deadline:
//
//   - get: an idempotent call (HTTP GET; gRPC EmptyCall, declared idempotent to the
//     hedger), which may be hedged and retried;
//   - post-nokey: a non-idempotent call without a key (HTTP POST; gRPC UnaryCall), from
//     a retry layer without WithIdempotencyKeys;
//   - post-key: the same non-idempotent call from a retry layer with
//     WithIdempotencyKeys, which may be retried and hedged, always with its key.
//
// Each call carries an id of the test's own (X-Reliability-Call) that the server
// counts. Checked in every scenario: every call ends by its deadline + lateBound
// (beyond the lateness of a bare timer on the same machine at the same time);
// a post-key call always reaches the server with one and the same key; an HTTP
// post-nokey call reaches the server at most once.

const (
	faultTimeout = 100 * time.Millisecond // each call's deadline
	grpcGet      = "/grpc.testing.TestService/EmptyCall"
)

// faultScenario describes one way the downstream misbehaves.
type faultScenario struct {
	name string
	// resetAccept: every n-th accepted connection is reset before anything is read.
	resetAccept int64
	// resetAfter: every n-th request is read, then its connection reset.
	resetAfter int64
	// hang: the handler never answers (it ignores its context) until the test ends.
	hang bool
	// stall: the handler sends the response's headers (HTTP: and the first bytes of
	// its body), then stalls like hang.
	stall bool
	// refused: nothing listens at the address; blackhole: something listens but
	// never accepts, so connections are made and never answered.
	refused, blackhole bool
	// restart: the downstream is killed (listener and every connection closed at
	// once, in-flight requests included) and restarted on the same address, 3 times.
	restart bool
	// attemptTimeout is the retry layer's per-attempt limit (0: none).
	attemptTimeout time.Duration
	// perCaller is the number of calls of each of the 8 callers (the restart
	// scenario runs until the restarts are done, at most perCaller × 40 calls).
	perCaller int
}

var faultScenarios = []faultScenario{
	{name: "restart", restart: true, perCaller: 30},
	{name: "refused", refused: true, perCaller: 6},
	{name: "reset-before-send", resetAccept: 2, perCaller: 30},
	{name: "reset-after-send", resetAfter: 3, perCaller: 30},
	{name: "reset-after-send-attempt-timeout", resetAfter: 3, attemptTimeout: 30 * time.Millisecond, perCaller: 30},
	{name: "never-answers", hang: true, perCaller: 4},
	{name: "never-answers-attempt-timeout", hang: true, attemptTimeout: 30 * time.Millisecond, perCaller: 4},
	{name: "blackhole", blackhole: true, perCaller: 4},
	{name: "stalls-after-headers", stall: true, perCaller: 4},
}

const faultCallers = 8

// faultBackend is the server side of a scenario, shared by the HTTP handler and the
// gRPC service: it records each arrival in the ledger, then hangs, resets the
// connection, or answers after 1–5 ms.
type faultBackend struct {
	testgrpc.UnimplementedTestServiceServer
	sc      faultScenario
	ledger  *ledger
	release chan struct{} // closed when the test ends: hung handlers return
	lis     atomic.Pointer[trackingListener]

	n, resets atomic.Int64
}

// serve decides the fate of one arrival: "hang", "stall", "reset" or "answer" (after
// waiting 1–5 ms).
func (b *faultBackend) serve(ctx context.Context, id, key string) string {
	b.ledger.record(id, key)
	n := b.n.Add(1)
	switch {
	case b.sc.hang:
		<-b.release
		return "hang"
	case b.sc.stall:
		return "stall"
	case b.sc.resetAfter > 0 && n%b.sc.resetAfter == 0:
		b.resets.Add(1)
		return "reset"
	}
	timer := time.NewTimer(time.Millisecond + rand.N(4*time.Millisecond))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
	return "answer"
}

func (b *faultBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body) // the request is read in full
	switch b.serve(r.Context(), r.Header.Get(idHeader), r.Header.Get("Idempotency-Key")) {
	case "reset":
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			resetConn(c)
		}
	case "stall":
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "the beginning of an answer")
		_ = http.NewResponseController(w).Flush()
		<-b.release
	case "answer":
		_, _ = io.WriteString(w, "ok")
	}
}

func mdValue(md metadata.MD, k string) string {
	if v := md.Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (b *faultBackend) grpcServe(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	switch b.serve(ctx, mdValue(md, idMetadata), mdValue(md, "idempotency-key")) {
	case "reset":
		if p, ok := peer.FromContext(ctx); ok {
			if l := b.lis.Load(); l != nil {
				l.reset(p.Addr.String())
			}
		}
		return status.Error(codes.Internal, "connection reset") // never reaches the client
	case "stall":
		_ = grpc.SendHeader(ctx, metadata.Pairs("x-reliability-stall", "1"))
		<-b.release
		return status.Error(codes.Internal, "released")
	case "hang":
		return status.Error(codes.Internal, "released")
	}
	return ctx.Err()
}

func (b *faultBackend) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if err := b.grpcServe(ctx); err != nil {
		return nil, err
	}
	return &testgrpc.SimpleResponse{Username: "ok"}, nil
}

func (b *faultBackend) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	if err := b.grpcServe(ctx); err != nil {
		return nil, err
	}
	return &testgrpc.Empty{}, nil
}

// downstream runs the scenario's server: start, kill and restart it, or fake it.
type downstream struct {
	addr string
	stop func()
	// restarts runs the kill/restart cycles, paced by the calls that end (ended); it
	// returns when they are done.
	restarts func(t *testing.T, ended *tally)
	accepted func() int64
}

// startDownstream starts what the scenario needs; serve starts a real server at addr
// ("" for a free port) and returns its listener and its kill function.
func startDownstream(t *testing.T, sc faultScenario, serve func(addr string) (*trackingListener, func(), error)) *downstream {
	switch {
	case sc.refused:
		l := listenLoopback(t, "")
		addr := l.Addr().String()
		l.Close() // nothing listens there any more
		return &downstream{addr: addr, stop: func() {}, accepted: func() int64 { return 0 }}
	case sc.blackhole:
		// Listening, never accepting: the kernel completes the handshakes, nobody
		// ever reads or answers.
		l := listenLoopback(t, "")
		return &downstream{addr: l.Addr().String(), stop: func() { l.Close() }, accepted: func() int64 { return 0 }}
	}
	lis, kill, err := serve("")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var total int64
	d := &downstream{addr: lis.Addr().String()}
	cur, curKill := lis, kill
	d.stop = func() {
		mu.Lock()
		defer mu.Unlock()
		if curKill != nil {
			curKill()
			total += cur.accepted.Load()
			curKill = nil
		}
	}
	d.accepted = func() int64 {
		mu.Lock()
		defer mu.Unlock()
		if curKill != nil {
			return total + cur.accepted.Load()
		}
		return total
	}
	d.restarts = func(t *testing.T, ended *tally) {
		for range 3 {
			ended.wait(cycleCalls) // up: calls are answered
			d.stop()
			ended.wait(cycleCalls) // down: connections are refused
			var err error
			for try := 0; try < 50; try++ { // the port may take a moment to be free
				var l *trackingListener
				var k func()
				if l, k, err = serve(d.addr); err == nil {
					mu.Lock()
					cur, curKill = l, k
					mu.Unlock()
					break
				}
				ended.wait(1)
			}
			if err != nil {
				t.Errorf("restart on %s: %v", d.addr, err)
				return
			}
		}
		ended.wait(cycleCalls)
	}
	return d
}

// cycleCalls is how many calls end in each phase of a restart cycle (the server up,
// then down): the phases follow the traffic, not the clock, so that a loaded
// machine's slow calls lengthen them instead of leaving them empty.
const cycleCalls = 100

// tally counts the calls that have ended, for a goroutine that waits on them.
type tally struct {
	mu   sync.Mutex
	cond sync.Cond
	n    int64
}

// add counts one call ended.
func (t *tally) add() {
	t.mu.Lock()
	t.n++
	t.cond.Broadcast()
	t.mu.Unlock()
}

func newTally() *tally {
	t := &tally{}
	t.cond.L = &t.mu
	return t
}

// reach returns once n calls in all have ended.
func (t *tally) reach(n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.until(n)
}

// wait returns once k more calls have ended.
func (t *tally) wait(k int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.until(t.n + k)
}

// until waits, t.mu held, until n calls in all have ended.
func (t *tally) until(n int64) {
	for t.n < n {
		t.cond.Wait()
	}
}

// faultCall makes one call of the given kind; the runner measures its lateness.
type faultCall func(ctx context.Context, kind int, id string) error

var faultKinds = [...]string{"get", "post-nokey", "post-key"}

// runFault drives the scenario's calls and checks what every scenario must hold.
func runFault(t *testing.T, sc faultScenario, d *downstream, b *faultBackend, call faultCall, stack string) {
	var late lateness
	ended := newTally()
	var mu sync.Mutex
	outcomes := map[string]int{}
	samples := map[string]string{} // the first error of each outcome, for the log
	done := make(chan struct{})
	if d.restarts != nil && sc.restart {
		go func() { defer close(done); d.restarts(t, ended) }()
	} else {
		close(done)
	}
	probe := startProbe()
	var wg sync.WaitGroup
	for c := range faultCallers {
		wg.Go(func() {
			// The callers start one after the other, caller c once c calls have
			// ended, so that when calls run to their deadlines the deadlines are
			// spread out rather than all due at once; paced by the calls, not by
			// the clock, so that a loaded machine spreads them the same way.
			ended.reach(int64(c))
			for i := 0; i < sc.perCaller*40; i++ {
				if i >= sc.perCaller {
					select {
					case <-done:
						return
					default:
					}
				}
				kind := (c + i) % len(faultKinds)
				id := fmt.Sprintf("%s-%d-%d", faultKinds[kind], c, i)
				ctx, cancel := context.WithTimeout(context.Background(), faultTimeout)
				err := call(ctx, kind, id)
				late.end(ctx)
				cancel()
				ended.add()
				k := faultKinds[kind] + " " + errKind(err)
				mu.Lock()
				outcomes[k]++
				if _, ok := samples[errKind(err)]; !ok && err != nil {
					samples[errKind(err)] = err.Error()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	<-done
	stall := probe.end()

	keys := make([]string, 0, len(outcomes))
	for k := range outcomes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var summary string
	for _, k := range keys {
		summary += fmt.Sprintf(" [%s: %d]", k, outcomes[k])
	}
	nokey, keyed, gets := b.ledger.report("post-nokey-"), b.ledger.report("post-key-"), b.ledger.report("get-")
	t.Logf("%s %s: outcomes%s", stack, sc.name, summary)
	for k, v := range samples {
		t.Logf("%s %s: e.g. %s: %.200s", stack, sc.name, k, v)
	}
	t.Logf("%s %s: lateness: %v; a bare timer's worst: %v", stack, sc.name, &late, stall)
	t.Logf("%s %s: server: %d connections accepted, %d arrivals, %d reset after send; get: %d calls arrived %d times; post-nokey: %d calls arrived %d times (max %d per call); post-key: %d calls arrived %d times (max %d per call, %d with more than one key, %d without)",
		stack, sc.name, d.accepted(), b.n.Load(), b.resets.Load(), gets.calls, gets.arrivals, nokey.calls, nokey.arrivals, nokey.maxArrivals,
		keyed.calls, keyed.arrivals, keyed.maxArrivals, keyed.multiKey, keyed.noKey)
	recordLateness(stack, sc.name, &late, stall)

	// The bound is lateBound plus a multiple of what the machine itself adds to a
	// bare timer in the same run: a loaded machine (2 cores, shared) sometimes does not
	// run the process for milliseconds, and then every goroutine wakes late, the
	// probe's too. A call's end after its deadline takes several wake-ups (the timer,
	// the goroutine blocked in the transport, each layer's, the caller's), each of
	// which can meet such a stall, where the probe takes one: hence the multiple.
	if w, allowed := late.worst(), lateAllowed(stall); w > allowed {
		t.Errorf("%s %s: a call ended %v after its deadline: more than the %v allowed (%v + %d × the %v a bare timer was late by)",
			stack, sc.name, w, allowed, lateBound, lateFactor, stall)
	} else if w > lateBound {
		t.Logf("%s %s: NOTE the worst call ended %v after its deadline, over %v, on a machine where a bare timer was %v late", stack, sc.name, w, lateBound, stall)
	}
	if keyed.multiKey > 0 || keyed.noKey > 0 {
		t.Errorf("%s %s: post-key: %d calls arrived with more than one key, %d without a key", stack, sc.name, keyed.multiKey, keyed.noKey)
	}
	if stack == "http" && nokey.maxArrivals > 1 {
		t.Errorf("http %s: a POST without Idempotency-Key reached the server %d times (%d such calls repeated)", sc.name, nokey.maxArrivals, nokey.repeated)
	}
	if stack == "grpc" && nokey.maxArrivals > 1 {
		// Documented behaviour of retry's gRPC side, reported rather than asserted:
		// it retries UNAVAILABLE (a connection reset after the call was sent included)
		// and a per-attempt DEADLINE_EXCEEDED whatever the method, so a method not
		// declared idempotent, without a key, may run twice. See RELIABILITY.md.
		t.Logf("grpc %s: NOTE a non-idempotent call without key reached the server up to %d times (%d such calls repeated): the gRPC retry layer retries UNAVAILABLE for every method (per-attempt timeouts only for idempotent or keyed calls)", sc.name, nokey.maxArrivals, nokey.repeated)
	}
}

// latenessTable gathers the worst lateness of every scenario, for the final report.
var latenessTable struct {
	sync.Mutex
	rows []string
}

func recordLateness(stack, name string, l *lateness, stall time.Duration) {
	latenessTable.Lock()
	defer latenessTable.Unlock()
	latenessTable.rows = append(latenessTable.rows, fmt.Sprintf("%-5s %-34s %v; bare timer worst %v", stack, name, l, stall.Round(10*time.Microsecond)))
}

func faultRetryOptions(sc faultScenario, keyed bool) []retry.Option {
	opts := []retry.Option{
		retry.WithMaxAttempts(3),
		retry.WithBackoff(retry.Backoff{Base: 2 * time.Millisecond, Max: 20 * time.Millisecond, Jitter: 0.2}),
		retry.WithAttemptTimeout(sc.attemptTimeout),
	}
	if keyed {
		opts = append(opts, retry.WithIdempotencyKeys(nil))
	}
	return opts
}

// TestFaultsHTTP runs every scenario over the HTTP stack.
func TestFaultsHTTP(t *testing.T) {
	for _, sc := range faultScenarios {
		t.Run(sc.name, func(t *testing.T) {
			b := &faultBackend{sc: sc, ledger: newLedger(), release: make(chan struct{})}
			handler := propagate.NewMiddleware()(b)
			d := startDownstream(t, sc, func(addr string) (*trackingListener, func(), error) {
				l, err := net.Listen("tcp", cmp.Or(addr, "127.0.0.1:0"))
				if err != nil {
					return nil, nil, err
				}
				s := &httpServer{srv: &http.Server{Handler: handler}, lis: newTrackingListener(l, sc.resetAccept), served: make(chan struct{})}
				// Without keep-alives every request needs a new connection, so that
				// resets at accept hit requests all along.
				s.srv.SetKeepAlivesEnabled(sc.resetAccept == 0)
				go func() { defer close(s.served); _ = s.srv.Serve(s.lis) }()
				return s.lis, s.kill, nil
			})
			base := newBaseTransport()
			// WithKeyedWrites: the post-key calls are hedged, as the scenarios mean.
			hopts := []hedge.Option{hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}), hedge.WithKeyedWrites()}
			plain := newHTTPStack(base, hopts, faultRetryOptions(sc, false)...)
			keyed := newHTTPStack(base, hopts, faultRetryOptions(sc, true)...)
			url := "http://" + d.addr
			call := func(ctx context.Context, kind int, id string) error {
				switch kind {
				case 0:
					_, err := doHTTP(ctx, plain.client, http.MethodGet, url, id, nil)
					return err
				case 1:
					_, err := doHTTP(ctx, plain.client, http.MethodPost, url, id, nil)
					return err
				default:
					_, err := doHTTP(ctx, keyed.client, http.MethodPost, url, id, nil)
					return err
				}
			}
			runFault(t, sc, d, b, call, "http")
			close(b.release)
			base.CloseIdleConnections()
			d.stop()
		})
	}
	logLatenessTable(t)
}

// TestFaultsGRPC runs every scenario over the gRPC stack.
func TestFaultsGRPC(t *testing.T) {
	for _, sc := range faultScenarios {
		t.Run(sc.name, func(t *testing.T) {
			b := &faultBackend{sc: sc, ledger: newLedger(), release: make(chan struct{})}
			d := startDownstream(t, sc, func(addr string) (*trackingListener, func(), error) {
				l, err := net.Listen("tcp", cmp.Or(addr, "127.0.0.1:0"))
				if err != nil {
					return nil, nil, err
				}
				var opts []grpc.ServerOption
				if sc.resetAccept > 0 {
					// Connections are short-lived, so that clients reconnect all along
					// and meet the resets at accept.
					opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: 50 * time.Millisecond, MaxConnectionAgeGrace: 50 * time.Millisecond}))
				}
				opts = append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(propagate.UnaryServerInterceptor())}, opts...)
				s := &grpcServer{srv: grpc.NewServer(opts...), lis: newTrackingListener(l, sc.resetAccept), served: make(chan struct{})}
				testgrpc.RegisterTestServiceServer(s.srv, b)
				b.lis.Store(s.lis)
				go func() { defer close(s.served); _ = s.srv.Serve(s.lis) }()
				return s.lis, s.kill, nil
			})
			hplain := hedge.New(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}), hedge.WithIdempotentMethods(grpcGet))
			hkeyed := hedge.New(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}), hedge.WithIdempotentMethods(grpcGet), hedge.WithKeyedWrites())
			// Against the black hole, grpc-go's own connect timeout (20 s) applies, so
			// that the calls wait on a connection that never completes; elsewhere the
			// client reconnects quickly.
			quick := !sc.blackhole
			plain := dialGRPC(t, d.addr, quick, hplain, faultRetryOptions(sc, false)...)
			keyed := dialGRPC(t, d.addr, quick, hkeyed, faultRetryOptions(sc, true)...)
			cplain, ckeyed := testgrpc.NewTestServiceClient(plain), testgrpc.NewTestServiceClient(keyed)
			call := func(ctx context.Context, kind int, id string) error {
				ctx = metadata.AppendToOutgoingContext(ctx, idMetadata, id)
				var err error
				switch kind {
				case 0:
					_, err = cplain.EmptyCall(ctx, &testgrpc.Empty{})
				case 1:
					_, err = cplain.UnaryCall(ctx, &testgrpc.SimpleRequest{})
				default:
					_, err = ckeyed.UnaryCall(ctx, &testgrpc.SimpleRequest{})
				}
				return grpcErr(err)
			}
			runFault(t, sc, d, b, call, "grpc")
			close(b.release)
			plain.Close()
			keyed.Close()
			d.stop()
		})
	}
	logLatenessTable(t)
}

// grpcErr maps a gRPC status to the context errors errKind knows.
func grpcErr(err error) error {
	switch status.Code(err) {
	case codes.OK:
		return nil
	case codes.DeadlineExceeded:
		return fmt.Errorf("%w: %v", context.DeadlineExceeded, err)
	case codes.Canceled:
		return fmt.Errorf("%w: %v", context.Canceled, err)
	}
	return err
}

func logLatenessTable(t *testing.T) {
	latenessTable.Lock()
	defer latenessTable.Unlock()
	for _, r := range latenessTable.rows {
		t.Log(r)
	}
	latenessTable.rows = nil
}

// lateAllowed is how long after its deadline a call may end, in a run where a bare
// timer (schedProbe) was stall late at worst: lateBound, plus lateFactor × stall.
// On an idle machine (stall 1–4 ms) that is 13–22 ms; it catches the failure the
// check is for, a layer that does not stop at the caller's deadline (a fixed
// per-hop timeout in its place ends the calls at that timeout, not at the deadline).
func lateAllowed(stall time.Duration) time.Duration { return lateBound + lateFactor*stall }

// lateFactor is the multiple of a bare timer's lateness a call may add: a call's end
// takes several wake-ups where the probe takes one.
const lateFactor = 3

// lateBound is how long after its deadline a call may end on a machine that runs it
// on time: 10 ms, as the issue asks; 50 ms under the race detector, which slows every
// step between the deadline and the caller's return (the worst measured on 2 busy
// cores was 18 ms).
var lateBound = func() time.Duration {
	if raceEnabled {
		return 50 * time.Millisecond
	}
	return 10 * time.Millisecond
}()
