package connectkit_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/retry"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// flaky answers CodeUnavailable to the first fails requests of each procedure, then
// "ok"; it records the attempt header of each request it gets.
type flaky struct {
	fails int
	mu    sync.Mutex
	calls map[string]int
	heads map[string][]string // grpc-previous-rpc-attempts, per procedure
	keys  map[string][]string // idempotency-key, per procedure
}

func newFlaky(fails int) *flaky {
	return &flaky{fails: fails, calls: map[string]int{}, heads: map[string][]string{}, keys: map[string][]string{}}
}

func (f *flaky) handle(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
	p := req.Spec().Procedure
	f.mu.Lock()
	f.calls[p]++
	n := f.calls[p]
	f.heads[p] = append(f.heads[p], req.Header().Get("Grpc-Previous-Rpc-Attempts"))
	f.keys[p] = append(f.keys[p], req.Header().Get("Idempotency-Key"))
	f.mu.Unlock()
	if n <= f.fails {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("warming up"))
	}
	return connect.NewResponse(wrapperspb.String("ok")), nil
}

func (f *flaky) count(p string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[p]
}

// fastBackoff keeps the tests' retries quick.
var fastBackoff = retry.WithBackoff(retry.Backoff{Base: time.Millisecond, Max: 2 * time.Millisecond})

// A procedure declared free of side effects is retried on UNAVAILABLE, each attempt
// with its own count; one that declares nothing is not, unless the call is keyed.
func TestRetryFollowsTheProcedureIdempotency(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			f := newFlaky(2)
			url, hc := serve(t, f.handle)
			get := client(hc, url, procGet, p.opt, connect.WithInterceptors(connectkit.Retry(fastBackoff)))
			if _, err := get.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x"))); err != nil {
				t.Fatalf("Get: %v", err)
			}
			f.mu.Lock()
			heads := f.heads[procGet]
			f.mu.Unlock()
			if len(heads) != 3 || heads[0] != "" || heads[1] != "1" || heads[2] != "2" {
				t.Errorf("Get's attempts carried grpc-previous-rpc-attempts %q; want \"\", 1, 2", heads)
			}

			post := client(hc, url, procPost, p.opt, connect.WithInterceptors(connectkit.Retry(fastBackoff)))
			_, err := post.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x")))
			if connect.CodeOf(err) != connect.CodeUnavailable || f.count(procPost) != 1 {
				t.Errorf("Post: %v after %d attempts; want UNAVAILABLE after 1 (it may have run)", err, f.count(procPost))
			}

			keyed := client(hc, url, procPost, p.opt, connect.WithInterceptors(connectkit.Retry(fastBackoff, retry.WithIdempotencyKeys(nil))))
			if _, err := keyed.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x"))); err != nil {
				t.Fatalf("keyed Post: %v", err)
			}
			f.mu.Lock()
			keys := f.keys[procPost][1:]
			f.mu.Unlock()
			if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
				t.Errorf("the keyed Post's attempts carried the keys %q; want one key, twice", keys)
			}
		})
	}
}

// A guard's refusal for lack of time is not retried: a retry would have less.
func TestRetryDoesNotRetryARefusal(t *testing.T) {
	var arrived atomic.Int32
	counting := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { arrived.Add(1); h.ServeHTTP(w, r) })
	}
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			arrived.Store(0)
			url, hc := serveWrapped(t, counting, ok, connectkit.HandlerOption(deadlinekit.WithShortCircuit(shortcircuit.WithFloor(500*time.Millisecond))))
			c := client(hc, url, procGet, p.opt, connectkit.ClientOption())
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := c.CallUnary(ctx, connect.NewRequest(wrapperspb.String("x")))
			if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
				t.Fatalf("err = %v; want the guard's DeadlineExceeded", err)
			}
			if n := arrived.Load(); n != 1 {
				t.Errorf("%d requests reached the server; want 1, the refusal not retried", n)
			}
		})
	}
}

// A slow primary of an idempotent procedure is hedged, and the hedge's answer wins;
// a procedure with side effects is not hedged.
func TestHedgeOnlyIdempotentProcedures(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			var calls atomic.Int32
			url, hc := serve(t, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
				// The primary is slow: told by its header, not by arriving first, which
				// a loaded machine may not keep to.
				if calls.Add(1); req.Header().Get("Grpc-Previous-Rpc-Attempts") == "" {
					select {
					case <-time.After(2 * time.Second):
					case <-ctx.Done():
						return nil, ctx.Err() // connect-go answers the context's code
					}
				}
				return connect.NewResponse(wrapperspb.String(req.Header().Get("Grpc-Previous-Rpc-Attempts"))), nil
			})
			h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: 20 * time.Millisecond}))
			get := client(hc, url, procGet, p.opt, connectkit.ClientOption(deadlinekit.WithSharedHedger(h)))
			resp, err := get.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x")))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Msg.GetValue() != "1" {
				t.Errorf("Get answered %q; want the hedge's answer (attempt count 1), not the slow primary's", resp.Msg.GetValue())
			}
			if s := h.Stats(); s.Hedges != 1 || s.HedgeWins != 1 {
				t.Errorf("stats %+v; want one hedge, won", s)
			}

			calls.Store(0)
			post := client(hc, url, procPost, p.opt, connectkit.ClientOption(deadlinekit.WithSharedHedger(h)))
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err = post.CallUnary(ctx, connect.NewRequest(wrapperspb.String("x")))
			if connect.CodeOf(err) != connect.CodeDeadlineExceeded || calls.Load() != 1 {
				t.Errorf("Post: %v after %d requests; want its deadline after 1 (no hedge)", err, calls.Load())
			}
		})
	}
}

// A dead downstream opens the circuit; then calls fail at once, unsent, with
// CodeUnavailable and the time to the next probe.
func TestBreakerOpensOnADeadTarget(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			var calls atomic.Int32
			url, hc := serve(t, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
				calls.Add(1)
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("down"))
			})
			b := breaker.New(breaker.WithConsecutiveFailures(5))
			c := client(hc, url, procGet, p.opt, connectkit.ClientOption(deadlinekit.WithSharedBreaker(b), deadlinekit.Without(deadlinekit.Retry)))
			for range 5 {
				if _, err := c.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x"))); connect.CodeOf(err) != connect.CodeUnavailable {
					t.Fatalf("err = %v; want UNAVAILABLE", err)
				}
			}
			n := calls.Load()
			_, err := c.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x")))
			var ce *connect.Error
			if !errors.Is(err, breaker.ErrOpen) || !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable || ce.Meta().Get("Grpc-Retry-Pushback-Ms") == "" {
				t.Fatalf("err = %v; want UNAVAILABLE matching breaker.ErrOpen, with a pushback", err)
			}
			if calls.Load() != n {
				t.Error("the refused call reached the server")
			}
		})
	}
}

// A procedure declared idempotent with WithIdempotentMethods is hedged by a shared
// Hedger too: the declaration is the client's, whichever Hedger it uses.
func TestSharedHedgerKeepsTheStacksIdempotentMethods(t *testing.T) {
	url, hc := serve(t, ok)
	h := hedge.New()
	post := client(hc, url, procPost, connectkit.ClientOption(deadlinekit.WithIdempotentMethods(procPost), deadlinekit.WithSharedHedger(h)))
	for range 3 {
		if _, err := post.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x"))); err != nil {
			t.Fatal(err)
		}
	}
	if s := h.Stats(); s.Primaries != 3 || s.NotIdempotent != 0 {
		t.Errorf("shared Hedger's stats %+v; want Post, declared idempotent by the stack's option, hedgeable 3 times", s)
	}
}
