package reliability_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
)

// Shared by the leak, load and fault tests: a listener that counts (and can reset)
// the server's connections, the client stacks, a ledger of what the server saw, and
// a lateness recorder.

// idHeader carries the test's own id of a logical call, identical on every attempt,
// so that the server can count how many times a call reached it.
const (
	idHeader   = "X-Reliability-Call"
	idMetadata = "x-reliability-call"
)

// trackingListener counts the connections a server accepted and still holds open.
// With resetEvery n > 0, every n-th connection is reset (RST, SetLinger(0)) as soon
// as it is accepted, before anything is read from it. Its conns can be reset later by
// remote address (reset), which a handler uses to cut the connection after it read
// the request.
type trackingListener struct {
	net.Listener
	resetEvery int64

	accepted  atomic.Int64 // connections accepted, reset ones included
	resetAtOn atomic.Int64 // connections reset at accept
	mu        sync.Mutex
	open      map[string]*trackedConn
	peak      int
}

func newTrackingListener(l net.Listener, resetEvery int64) *trackingListener {
	return &trackingListener{Listener: l, resetEvery: resetEvery, open: map[string]*trackedConn{}}
}

// listenLoopback listens on 127.0.0.1 (addr "" picks a free port).
func listenLoopback(t testing.TB, addr string) net.Listener {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	return l
}

func (l *trackingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		n := l.accepted.Add(1)
		if l.resetEvery > 0 && n%l.resetEvery == 0 {
			l.resetAtOn.Add(1)
			resetConn(c)
			continue
		}
		tc := &trackedConn{Conn: c, l: l}
		l.mu.Lock()
		l.open[c.RemoteAddr().String()] = tc
		l.peak = max(l.peak, len(l.open))
		l.mu.Unlock()
		return tc, nil
	}
}

// openConns is the number of accepted connections not closed yet.
func (l *trackingListener) openConns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.open)
}

func (l *trackingListener) peakConns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.peak
}

// reset resets the connection whose remote address is addr, if it is still open.
func (l *trackingListener) reset(addr string) bool {
	l.mu.Lock()
	c := l.open[addr]
	l.mu.Unlock()
	if c == nil {
		return false
	}
	resetConn(c)
	return true
}

type trackedConn struct {
	net.Conn
	l    *trackingListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.open, c.RemoteAddr().String())
		c.l.mu.Unlock()
	})
	return err
}

// resetConn closes c with an RST instead of a FIN: SetLinger(0) then Close.
func resetConn(c net.Conn) {
	inner := c
	if tc, ok := c.(*trackedConn); ok {
		inner = tc.Conn
	}
	if tcp, ok := inner.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = c.Close()
}

// httpServer is an http.Server on a trackingListener, with its Serve goroutine.
type httpServer struct {
	srv    *http.Server
	lis    *trackingListener
	served chan struct{}
}

func startHTTPServer(t testing.TB, addr string, h http.Handler, resetEvery int64, keepAlives bool) *httpServer {
	t.Helper()
	s := &httpServer{
		srv:    &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second},
		lis:    newTrackingListener(listenLoopback(t, addr), resetEvery),
		served: make(chan struct{}),
	}
	s.srv.SetKeepAlivesEnabled(keepAlives)
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(s.lis)
	}()
	return s
}

func (s *httpServer) addr() string { return s.lis.Addr().String() }

// kill closes the listener and every connection at once, in-flight requests
// included, and waits for Serve to return.
func (s *httpServer) kill() {
	_ = s.srv.Close()
	<-s.served
}

// grpcServer is a grpc.Server on a trackingListener, with its Serve goroutine.
type grpcServer struct {
	srv    *grpc.Server
	lis    *trackingListener
	served chan struct{}
}

func (s *grpcServer) kill() {
	s.srv.Stop()
	<-s.served
}

// newBaseTransport is the net/http transport at the bottom of the client stack.
func newBaseTransport() *http.Transport {
	return &http.Transport{
		Proxy:               nil, // loopback only, never a proxy from the environment
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     30 * time.Second,
	}
}

// httpStack is the documented client stack: retry → hedge → propagate → base.
type httpStack struct {
	client *http.Client
	base   *http.Transport
	hedger *hedge.Hedger
}

func newHTTPStack(base *http.Transport, hopts []hedge.Option, ropts ...retry.Option) *httpStack {
	h := hedge.New(hopts...)
	rt := retry.NewTransport(h.Transport(propagate.NewTransport(base)), ropts...)
	return &httpStack{client: &http.Client{Transport: rt}, base: base, hedger: h}
}

// dialGRPC makes a client with the documented interceptor chain:
// retry → hedge → propagate. With quick, reconnection is quick (5–50 ms backoff, 50 ms
// connect timeout), so that a restarted server is found again within the run;
// otherwise grpc-go's defaults apply.
func dialGRPC(t testing.TB, addr string, quick bool, h *hedge.Hedger, ropts ...retry.Option) *grpc.ClientConn {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if quick {
		opts = append(opts, grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 50 * time.Millisecond},
			MinConnectTimeout: 50 * time.Millisecond,
		}))
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, append(opts,
		grpc.WithChainUnaryInterceptor(
			retry.UnaryClientInterceptor(ropts...),
			h.UnaryClientInterceptor(),
			propagate.UnaryClientInterceptor(),
		))...)
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

// ledger is what the server saw of each logical call: how many times it arrived,
// and with which idempotency keys.
type ledger struct {
	mu       sync.Mutex
	arrivals map[string]int
	keys     map[string][]string // distinct keys seen per call ("" for none)
}

func newLedger() *ledger {
	return &ledger{arrivals: map[string]int{}, keys: map[string][]string{}}
}

func (l *ledger) record(id, key string) {
	if id == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.arrivals[id]++
	if !slices.Contains(l.keys[id], key) {
		l.keys[id] = append(l.keys[id], key)
	}
}

// ledgerReport sums up the calls whose id starts with prefix.
type ledgerReport struct {
	calls       int // calls that reached the server at least once
	arrivals    int // arrivals in all
	repeated    int // calls that arrived more than once
	maxArrivals int
	multiKey    int // calls that arrived with more than one distinct key
	noKey       int // calls that arrived without a key
}

func (l *ledger) report(prefix string) ledgerReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	var r ledgerReport
	for id, n := range l.arrivals {
		if len(id) < len(prefix) || id[:len(prefix)] != prefix {
			continue
		}
		r.calls++
		r.arrivals += n
		r.maxArrivals = max(r.maxArrivals, n)
		if n > 1 {
			r.repeated++
		}
		if len(l.keys[id]) > 1 {
			r.multiKey++
		}
		if slices.Contains(l.keys[id], "") {
			r.noKey++
		}
	}
	return r
}

// lateness records how long after its context's deadline each call ended (negative:
// before). Both instants come from the monotonic clock: the deadline of a context made
// by context.WithTimeout carries a monotonic reading.
type lateness struct {
	mu   sync.Mutex
	late []time.Duration
}

// end records the end of a call made under ctx; ctx must have a deadline.
func (l *lateness) end(ctx context.Context) {
	now := time.Now()
	dl, ok := ctx.Deadline()
	if !ok {
		panic("lateness.end: context without deadline")
	}
	l.mu.Lock()
	l.late = append(l.late, now.Sub(dl))
	l.mu.Unlock()
}

// quantiles returns the number of calls, how many ended after their deadline, and the
// p50, p99 and maximum lateness among those (0 when none did).
func (l *lateness) summary() (n, after int, p50, p99, worst time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n = len(l.late)
	var pos []time.Duration
	for _, d := range l.late {
		if d > 0 {
			pos = append(pos, d)
		}
	}
	slices.Sort(pos)
	if len(pos) == 0 {
		return n, 0, 0, 0, 0
	}
	q := func(p float64) time.Duration { return pos[min(len(pos)-1, int(p*float64(len(pos))))] }
	return n, len(pos), q(0.5), q(0.99), pos[len(pos)-1]
}

func (l *lateness) worst() time.Duration {
	_, _, _, _, w := l.summary()
	return w
}

func (l *lateness) String() string {
	n, after, p50, p99, worst := l.summary()
	return fmt.Sprintf("%d calls, %d ended after their deadline: lateness p50 %v, p99 %v, worst %v",
		n, after, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), worst.Round(10*time.Microsecond))
}

// doHTTP sends one call and reads its answer to the end. The request body, when there
// is one, is replayable (http.NewRequest sets GetBody for a strings.Reader).
func doHTTP(ctx context.Context, client *http.Client, method, url, id string, hdr http.Header) (int, error) {
	var body io.Reader
	if method != http.MethodGet {
		body = strings.NewReader("payload of " + id)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return 0, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set(idHeader, id)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}

// errKind names the class of a call's error, for the reports.
func errKind(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, retry.ErrBudgetExhausted):
		return "retry budget exhausted"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	default:
		return "other"
	}
}

// waitUntil reports whether cond became true before the test binary's deadline
// (go test -timeout) draws near, looking at each tick of a 10 ms ticker and calling
// nudge (if any) before each look. No bound of its own: on a loaded machine a
// connection may take long to close, and only a leak never ends.
func waitUntil(t *testing.T, nudge func(), cond func() bool) bool {
	var end <-chan time.Time
	if dl, has := t.Deadline(); has {
		end = time.After(time.Until(dl) * 9 / 10)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if nudge != nil {
			nudge()
		}
		if cond() {
			return true
		}
		select {
		case <-tick.C:
		case <-end:
			return false
		}
	}
}

// schedProbe measures the lateness of the machine itself: a goroutine that waits,
// over and over, for a context with a 2 ms deadline to end, with nothing of the
// toolkit in between. On a loaded machine, the process is sometimes not scheduled for
// milliseconds; the probe sees those stalls as the calls do.
type schedProbe struct {
	stop, done chan struct{}
	late       lateness
}

func startProbe() *schedProbe {
	p := &schedProbe{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for i := 0; i < 1_000_000; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
			select {
			case <-p.stop:
				cancel()
				return
			case <-ctx.Done():
			}
			p.late.end(ctx)
			cancel()
		}
	}()
	return p
}

// end stops the probe and returns the worst lateness it saw.
func (p *schedProbe) end() time.Duration {
	close(p.stop)
	<-p.done
	return p.late.worst()
}
