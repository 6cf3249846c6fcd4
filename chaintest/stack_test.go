package chaintest_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// chain is client → A (HTTP) → B (gRPC) → C (HTTP) on loopback, each hop built with
// the four constructors and nothing else. The hops record what they saw.
type chain struct {
	t        *testing.T
	client   *http.Client
	aURL     string
	hits     [3]atomic.Int32 // requests that reached A's, B's, C's handler or guard
	mu       sync.Mutex
	budgets  [3]time.Duration // time left each handler saw, last request
	cAnswers func(n int32) int
}

type chainOpts struct {
	a, b, c []deadlinekit.Option // per hop; the client's options are a's
	// cAnswers gives C's status for its n-th request (1-based); nil: 200.
	cAnswers func(n int32) int
}

// counting counts the requests that reach the stack of hop i (before its guard).
func (ch *chain) counting(i int, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ch.hits[i].Add(1)
		h.ServeHTTP(w, r)
	})
}

func (ch *chain) saw(i int, ctx context.Context) {
	left, _ := deadline.Remaining(ctx)
	ch.mu.Lock()
	ch.budgets[i] = left
	ch.mu.Unlock()
}

func startChain(t *testing.T, o chainOpts) *chain {
	t.Helper()
	ch := &chain{t: t, cAnswers: o.cAnswers}

	// C: HTTP.
	c := httptest.NewServer(ch.counting(2, deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ch.saw(2, r.Context())
		code := http.StatusOK
		if ch.cAnswers != nil {
			code = ch.cAnswers(ch.hits[2].Load())
		}
		if code != http.StatusOK {
			http.Error(w, "c says "+http.StatusText(code), code)
			return
		}
		io.WriteString(w, "ok")
	}), o.c...)))
	t.Cleanup(c.Close)

	// B: gRPC, calls C over HTTP.
	bToC := stackClient(t, o.b...)
	count := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ch.hits[1].Add(1)
		return h(ctx, req)
	})
	b := serveHop(t, func(ctx context.Context) error {
		ch.saw(1, ctx)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
		if err != nil {
			return err
		}
		return deadlinekit.GRPCError(ctx, deadlinekit.FromHTTP(bToC.Do(req)))
	}, append([]grpc.ServerOption{count}, deadlinekit.ServerOptions(o.b...)...)...)

	// A: HTTP, calls B over gRPC.
	conn := dial(t, b, deadlinekit.DialOptions(o.a...)...)
	a := httptest.NewServer(ch.counting(0, deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ch.saw(0, r.Context())
		// Through the stack's retry layer the error carries the trailer's pushback.
		err := deadlinekit.FromGRPC(invoke(r.Context(), conn), nil)
		if err != nil {
			deadlinekit.WriteHTTPError(w, err)
			return
		}
		io.WriteString(w, "ok")
	}), o.a...)))
	t.Cleanup(a.Close)
	ch.aURL = a.URL
	ch.client = stackClient(t, o.a...)
	return ch
}

// call sends one user request with the given budget; it returns the status and body.
func (ch *chain) call(budget time.Duration) (int, string, http.Header) {
	ch.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ch.aURL, nil)
	resp, err := ch.client.Do(req)
	if err != nil {
		ch.t.Fatalf("the user's call failed without an answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// Budgets decrease hop by hop: each hop keeps its reserve and passes on the rest.
func TestStackBudgetsDecrease(t *testing.T) {
	ch := startChain(t, chainOpts{})
	code, body, _ := ch.call(2 * time.Second)
	if code != http.StatusOK {
		t.Fatalf("status %d (%s); want 200", code, body)
	}
	a, b, c := ch.budgets[0], ch.budgets[1], ch.budgets[2]
	t.Logf("budgets: A %v, B %v, C %v", a, b, c)
	if !(a <= 2*time.Second && b < a-deadlinekit.DefaultReserve/2 && c < b-deadlinekit.DefaultReserve/2 && c > 0) {
		t.Errorf("budgets A %v, B %v, C %v; want each hop below the previous by about the reserve (%v)", a, b, c, deadlinekit.DefaultReserve)
	}
}

// A request below C's floor reaches the user as 504 with the floor in the message,
// and no layer retries the refusal: C saw exactly one request.
func TestStackRefusalIsNotRetried(t *testing.T) {
	ch := startChain(t, chainOpts{c: []deadlinekit.Option{deadlinekit.WithFloor(time.Second)}})
	code, body, hdr := ch.call(300 * time.Millisecond)
	if code != http.StatusGatewayTimeout {
		t.Fatalf("status %d (%s); want 504", code, body)
	}
	if v := hdr.Get("Grpc-Retry-Pushback-Ms"); v != "-1" {
		t.Errorf("the user's answer carries grpc-retry-pushback-ms %q; want -1, the refusal's 'do not retry'", v)
	}
	if !strings.Contains(body, "floor 1s") {
		t.Errorf("the user's answer %q does not say the floor", body)
	}
	for i, name := range []string{"A", "B", "C"} {
		if n := ch.hits[i].Load(); n != 1 {
			t.Errorf("%s saw %d requests; want 1", name, n)
		}
	}
}

// Two 503s then a 200: the layer nearest the failure absorbs them; the user sees 200.
func TestStackAbsorbsTransientFailures(t *testing.T) {
	ch := startChain(t, chainOpts{cAnswers: func(n int32) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}})
	code, body, _ := ch.call(2 * time.Second)
	if code != http.StatusOK {
		t.Fatalf("status %d (%s); want 200", code, body)
	}
	if a, b, c := ch.hits[0].Load(), ch.hits[1].Load(), ch.hits[2].Load(); a != 1 || b != 1 || c != 3 {
		t.Errorf("requests A %d, B %d, C %d; want 1, 1, 3", a, b, c)
	}
}

// C down, three retrying layers above it: the one-layer rule keeps C's load at the
// one layer's attempts, not 3 × 3 × 3.
func TestStackOutageIsNotAmplified(t *testing.T) {
	ch := startChain(t, chainOpts{cAnswers: func(int32) int { return http.StatusServiceUnavailable }})
	code, body, _ := ch.call(2 * time.Second)
	if code != http.StatusServiceUnavailable {
		t.Fatalf("status %d (%s); want 503", code, body)
	}
	if n := ch.hits[2].Load(); n > 3 {
		t.Errorf("C saw %d requests for one user request; want at most 3", n)
	}
	t.Logf("requests A %d, B %d, C %d", ch.hits[0].Load(), ch.hits[1].Load(), ch.hits[2].Load())
}

// Through the stack's client, a gRPC refusal's "do not retry" travels with the
// error itself: FromGRPC needs no trailer to tell a refusal from a timeout.
func TestFromGRPCThroughTheStack(t *testing.T) {
	addr := serveHop(t, func(context.Context) error { return nil }, deadlinekit.ServerOptions(deadlinekit.WithFloor(time.Second))...)
	conn := dial(t, addr, deadlinekit.DialOptions()...)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := deadlinekit.FromGRPC(invoke(ctx, conn), nil)
	if !errors.Is(err, deadline.ErrInsufficientBudget) {
		t.Fatalf("FromGRPC(refusal, nil) = %v; want a budget refusal (matching deadline.ErrInsufficientBudget)", err)
	}
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "floor 1s") {
		t.Errorf("code %v, message %q; want DeadlineExceeded with the floor", status.Code(err), err)
	}
}

// deadServer is a downstream that answers every request 503, with a count of them.
func deadServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	hits := new(atomic.Int32)
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(dead.Close)
	return dead, hits
}

// A dead downstream under steady load: with the breaker in the stack (beneath
// retry), the calls reaching it stop once its circuit is open, and the refusals are
// not retried (the next probe comes after the deadline); without it, every user
// request puts retry's three attempts on it.
func TestStackBreakerStopsTheFlood(t *testing.T) {
	dead, hits := deadServer(t)
	const requests = 50
	for _, tc := range []struct {
		name string
		opts []deadlinekit.Option
		max  int32
	}{
		{"without the breaker", []deadlinekit.Option{deadlinekit.Without(deadlinekit.Breaker)}, requests * 3},
		{"with the breaker", nil, breaker.DefaultMinCalls + 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits.Store(0)
			c := stackClient(t, tc.opts...)
			var refused int
			for range requests {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, dead.URL, nil)
				resp, err := c.Do(req)
				cancel()
				switch {
				case errors.Is(err, breaker.ErrOpen):
					refused++
				case err != nil:
					t.Fatalf("unexpected error: %v", err)
				default:
					resp.Body.Close()
				}
			}
			n := hits.Load()
			t.Logf("%d requests reached the dead server for %d user requests; %d refused at once", n, requests, refused)
			if n > tc.max {
				t.Errorf("%d requests reached the dead server; want at most %d", n, tc.max)
			}
			if tc.opts == nil && refused < requests-10 {
				t.Errorf("%d user requests refused by the open circuit; want nearly all %d after it opened", refused, requests)
			}
		})
	}
}

// TestStackBreakerCutsToTheProbeRate offers a dead downstream a steady load (an open
// loop: a request every 5 ms, whatever happened to the last) through the whole
// client stack, retry above the breaker. Once the circuit is open, the calls that
// reach the downstream per second fall from the offered rate times the retries to
// the probe rate: a few probes per sleep.
func TestStackBreakerCutsToTheProbeRate(t *testing.T) {
	const (
		every  = 5 * time.Millisecond
		run    = 2 * time.Second
		sleep  = 250 * time.Millisecond
		probes = 3
	)
	dead, hits := deadServer(t)
	c := stackClient(t, deadlinekit.WithBreaker(breaker.WithSleep(breaker.Sleep{First: sleep, Max: sleep, Factor: 1}), breaker.WithProbes(probes)))

	var wg sync.WaitGroup
	var sent, refused atomic.Int32
	start := time.Now()
	var afterHalf int32 // hits when half the run was over
	// Each request has its time; one the loop reaches late (a loaded machine did not
	// run it) goes at once, so that the whole load is offered.
	for i := range int(run / every) {
		time.Sleep(time.Until(start.Add(time.Duration(i) * every)))
		if afterHalf == 0 && time.Since(start) >= run/2 {
			afterHalf = hits.Load()
		}
		sent.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, dead.URL, nil)
			resp, err := c.Do(req)
			if errors.Is(err, breaker.ErrOpen) {
				refused.Add(1)
			} else if err == nil {
				resp.Body.Close()
			}
		}()
	}
	end := hits.Load()
	wg.Wait()
	// The second half of the run, long after the circuit opened: at most the probes of
	// each sleep (one failed probe reopens it; a few may be in flight together).
	secondHalf := end - afterHalf
	maxProbes := int32(run/2/sleep+1) * probes
	t.Logf("offered %d requests in %v (%d refused by the open circuit); %d reached the dead server, %d of them in the second half (at most %d probes)",
		sent.Load(), run, refused.Load(), hits.Load(), secondHalf, maxProbes)
	if secondHalf > maxProbes {
		t.Errorf("%d calls reached the dead server in the second half; want at most the %d probes", secondHalf, maxProbes)
	}
	if secondHalf == 0 {
		t.Errorf("no probe reached the dead server in the second half")
	}
	if r := refused.Load(); r < sent.Load()*3/4 {
		t.Errorf("%d of %d requests refused by the open circuit; want most", r, sent.Load())
	}
}

// Two clients sharing one Breaker: the outage one of them saw opens the circuit for
// the other, and the user reads its state.
func TestStackSharedBreaker(t *testing.T) {
	dead, hits := deadServer(t)
	b := breaker.New()
	one := stackClient(t, deadlinekit.WithSharedBreaker(b), deadlinekit.Without(deadlinekit.Retry))
	two := stackClient(t, deadlinekit.WithSharedBreaker(b))
	for range breaker.DefaultConsecutiveFailures {
		resp, err := one.Get(dead.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	target := breaker.TargetName("http", dead.Listener.Addr().String())
	if s := b.State(target); s != breaker.Open {
		t.Fatalf("state of %s = %v, want open", target, s)
	}
	n := hits.Load()
	// With a second to spare, the next probe (5 s away) is too late to wait for.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, dead.URL, nil)
	if _, err := two.Do(req); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("the second client's call: %v, want breaker.ErrOpen", err)
	}
	if hits.Load() != n {
		t.Errorf("the second client's call reached the dead server")
	}
}

// Two clients given one Hedger share its latency window, its extra-load cap and its
// statistics.
func TestStackSharedHedger(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	h := hedge.New()
	one := stackClient(t, deadlinekit.WithSharedHedger(h))
	two := stackClient(t, deadlinekit.WithSharedHedger(h), deadlinekit.WithHedge(hedge.WithMaxExtraLoad(0)))
	for _, c := range []*http.Client{one, two, two} {
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if s := h.Stats(); s.Primaries != 3 || s.Tokens == 0 {
		t.Errorf("the shared Hedger counted %d primaries (want 3), %v tokens (want its own cap's, not the ignored WithHedge's zero)", s.Primaries, s.Tokens)
	}
}

// An open circuit's refusal, relayed with the one-liners, is DESIGN's "circuit open":
// 503 / UNAVAILABLE with the time until the next probe, not a deadline's 504 and its
// "do not retry", also when the retry layer above gave up on it for lack of time.
func TestStackRelaysAnOpenCircuit(t *testing.T) {
	dead, _ := deadServer(t)
	b := breaker.New()
	c := stackClient(t, deadlinekit.WithSharedBreaker(b))
	target := breaker.TargetName("http", dead.Listener.Addr().String())
	for i := 0; b.State(target) != breaker.Open; i++ {
		if i == breaker.DefaultConsecutiveFailures {
			t.Fatalf("circuit %v after %d failed calls", b.State(target), i)
		}
		if resp, err := c.Get(dead.URL); err == nil {
			resp.Body.Close()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, dead.URL, nil)
	_, err := c.Do(req)
	oe, ok := breaker.IsOpen(err)
	if !ok {
		t.Fatalf("err = %v, want an open circuit's refusal", err)
	}
	if s := deadlinekit.HTTPStatus(err); s != http.StatusServiceUnavailable {
		t.Errorf("HTTPStatus = %d, want 503", s)
	}
	rec := httptest.NewRecorder()
	deadlinekit.WriteHTTPError(rec, err)
	ms, _ := strconv.Atoi(rec.Header().Get("grpc-retry-pushback-ms"))
	if rec.Code != http.StatusServiceUnavailable || ms <= 0 || time.Duration(ms)*time.Millisecond > oe.RetryAfter+time.Millisecond || rec.Header().Get("Retry-After") == "" {
		t.Errorf("written: %d, pushback %q, Retry-After %q; want 503 with the %v until the next probe", rec.Code,
			rec.Header().Get("grpc-retry-pushback-ms"), rec.Header().Get("Retry-After"), oe.RetryAfter)
	}
	if st, _ := status.FromError(deadlinekit.GRPCError(context.Background(), err)); st.Code() != codes.Unavailable {
		t.Errorf("GRPCError code = %v, want Unavailable", st.Code())
	}
}

// A downstream that says "unavailable, come back in 2 s" to a caller with 300 ms left:
// the caller's retry layer stops (the wait does not fit), and relaying that stop
// passes the downstream's word on, 503 and its pushback, not a refusal for lack of
// budget (504, "do not retry"): the caller's own caller may have the time to come back.
func TestStackRelaysAPushbackThatDidNotFit(t *testing.T) {
	addr := serveHop(t, func(ctx context.Context) error {
		_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "2000"))
		return status.Error(codes.Unavailable, "draining")
	}, deadlinekit.ServerOptions()...)
	conn := dial(t, addr, deadlinekit.DialOptions(deadlinekit.WithIdempotentMethods(hopMethod))...)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := invoke(ctx, conn)
	if err == nil {
		t.Fatal("the call succeeded")
	}
	rec := httptest.NewRecorder()
	deadlinekit.WriteHTTPError(rec, deadlinekit.FromGRPC(err, nil))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("grpc-retry-pushback-ms") != "2000" {
		t.Errorf("relayed as %d, pushback %q: %s; want 503 with the downstream's 2000 ms", rec.Code, rec.Header().Get("grpc-retry-pushback-ms"), rec.Body.String())
	}
}

// A server shedding load with "overloaded, come back in X" (503 and a pushback) does
// not open its callers' circuits: it answered at once and still serves part of the
// load, which the callers' breakers would otherwise cut to nothing.
func TestStackOverloadDoesNotOpenTheCircuit(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	srv := httptest.NewServer(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			close(entered)
			<-release
		}
	}), deadlinekit.WithShortCircuit(shortcircuit.WithMaxConcurrency(1), shortcircuit.WithQueue(0, shortcircuit.FIFO))))
	defer srv.Close()
	defer free() // before the server closes: a failed check must not leave the handler waiting
	b := breaker.New()
	c := stackClient(t, deadlinekit.WithSharedBreaker(b), deadlinekit.Without(deadlinekit.Retry))
	var wg sync.WaitGroup
	wg.Go(func() { // holds the one slot
		if resp, err := c.Get(srv.URL + "/hold"); err == nil {
			resp.Body.Close()
		}
	})
	// Nothing else is sent until the handler holds the slot. (Polling for a 503
	// instead raced the holder for the one slot: on a busy machine a poll could
	// take it first, the holder was refused, and no call was ever refused again.)
	<-entered
	const calls = 3 * breaker.DefaultConsecutiveFailures
	var refused, throttled int
	for range calls {
		resp, err := c.Get(srv.URL)
		switch {
		case errors.Is(err, breaker.ErrThrottled):
			throttled++ // the throttle's, on by default: the circuit is closed
		case err != nil:
			t.Errorf("refused locally: %v", err)
		default:
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("grpc-retry-pushback-ms") != "" {
				refused++
			}
		}
	}
	free()
	wg.Wait()
	target := breaker.TargetName("http", srv.Listener.Addr().String())
	if refused+throttled != calls || b.State(target) != breaker.Closed || b.Stats().Opens != 0 {
		t.Errorf("%d overload refusals, %d throttled; circuit %v, stats %+v; want every call answered 503 with a pushback or throttled, and the circuit closed",
			refused, throttled, b.State(target), b.Stats())
	}
	// A server that refuses all it gets is sent less than it is asked: the throttle
	// refuses the rest locally, where an open circuit would refuse everything.
	if throttled == 0 || refused == 0 {
		t.Errorf("%d overload refusals, %d throttled, of %d: want the server sent some and not all", refused, throttled, calls)
	}
}
