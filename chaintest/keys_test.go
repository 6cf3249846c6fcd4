package chaintest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/retry"
)

// Keys travel: caller → A (the stack with dedup) → B (the stack with dedup, counting
// its executions), over HTTP → gRPC and gRPC → HTTP. A's handler writes to B through
// the stack with retry.WithIdempotencyKeys.

// keysB is the downstream: every execution is counted, with the key it came with.
type keysB struct {
	testgrpc.UnimplementedTestServiceServer
	mu   sync.Mutex
	runs []string // "body key" of every execution
}

func (b *keysB) run(body, key string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.runs = append(b.runs, body+" "+key)
	return fmt.Sprintf("%s#%d", body, len(b.runs))
}

func (b *keysB) count() int { return len(b.seen()) }

func (b *keysB) seen() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.runs...)
}

func (b *keysB) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	key := metadata.ValueFromIncomingContext(ctx, "idempotency-key")
	return &testgrpc.SimpleResponse{Username: b.run(string(req.GetPayload().GetBody()), strings.Join(key, ","))}, nil
}

// write is A's call to B: one write of body, with the key forward (when not empty)
// put on the outgoing request by hand.
type write func(ctx context.Context, body, forward string) (string, error)

// keysHandler is A's work, whatever its protocol: it gets the inbound key and
// answers a string, or an error after which the handler has called dedup.Forget.
type keysHandler func(ctx context.Context, key string) (string, error)

// tenantKey carries the tenant of an HTTP request to A's scope.
type tenantKey struct{}

// scope is A's dedup scope: the tenant from the HTTP request, or from gRPC metadata.
func scope(ctx context.Context) string {
	if s, ok := ctx.Value(tenantKey{}).(string); ok {
		return s
	}
	if v := metadata.ValueFromIncomingContext(ctx, "tenant"); len(v) > 0 {
		return v[0]
	}
	return ""
}

// grpcB starts B over gRPC and returns A's write to it, through a client stack with
// retry.WithIdempotencyKeys.
func grpcB(t *testing.T, b *keysB) write {
	return grpcBWith(t, b, deadlinekit.WithRetry(retry.WithIdempotencyKeys(nil)))
}

// grpcBWith is grpcB through a client stack with opts.
func grpcBWith(t *testing.T, b *keysB, opts ...deadlinekit.Option) write {
	gs := grpc.NewServer(deadlinekit.ServerOptions(deadlinekit.WithDedup(dedup.NewMemoryStore()))...)
	testgrpc.RegisterTestServiceServer(gs, b)
	cc := dial(t, serveGRPC(t, gs), deadlinekit.DialOptions(opts...)...)
	client := testgrpc.NewTestServiceClient(cc)
	return func(ctx context.Context, body, forward string) (string, error) {
		if forward != "" {
			if md, ok := metadata.FromIncomingContext(ctx); ok {
				ctx = metadata.NewOutgoingContext(ctx, md) // the caller's metadata goes on
			} else {
				ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", forward)
			}
		}
		resp, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte(body)}})
		return resp.GetUsername(), err
	}
}

// httpB starts B over HTTP and returns A's write to it, through a client stack with
// retry.WithIdempotencyKeys.
func httpB(t *testing.T, b *keysB) write {
	return httpBWith(t, b, deadlinekit.WithRetry(retry.WithIdempotencyKeys(nil)))
}

// httpBWith is httpB through a client stack with opts.
func httpBWith(t *testing.T, b *keysB, opts ...deadlinekit.Option) write {
	srv := httptest.NewServer(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprint(w, b.run(string(body), r.Header.Get("Idempotency-Key")))
	}), deadlinekit.WithDedup(dedup.NewMemoryStore())))
	t.Cleanup(srv.Close)
	client := stackClient(t, opts...)
	return func(ctx context.Context, body, forward string) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/items", strings.NewReader(body))
		if err != nil {
			return "", err
		}
		if forward != "" {
			req.Header.Set("Idempotency-Key", forward) // copied by hand
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("B answered %d %s", resp.StatusCode, out)
		}
		return string(out), err
	}
}

// call is the caller's request to A: its key, its tenant; it returns A's answer.
type call func(key, tenant string) (string, error)

// httpA starts A over HTTP, with opts for its dedup, and returns the caller's call.
func httpA(t *testing.T, h keysHandler, opts ...dedup.Option) call {
	return httpServe(t, h, deadlinekit.WithDedup(dedup.NewMemoryStore(), append(opts, dedup.WithScope(scope))...))
}

// httpServe starts h over HTTP behind the stack with opts (the request's Tenant
// header in its context, for scope) and returns the caller's call.
func httpServe(t *testing.T, h keysHandler, opts ...deadlinekit.Option) call {
	stack := deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, err := h(r.Context(), r.Header.Get("Idempotency-Key"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		fmt.Fprint(w, out)
	}), opts...)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stack.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, r.Header.Get("Tenant"))))
	}))
	t.Cleanup(srv.Close)
	return httpCall(srv.URL+"/orders", "order")
}

// httpCall is the caller's POST of body to url, with its key and tenant.
func httpCall(url, body string) call {
	return func(key, tenant string) (string, error) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Tenant", tenant)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("%s answered %d %s", url, resp.StatusCode, out)
		}
		return string(out), nil
	}
}

// aService is A over gRPC.
type aService struct {
	testgrpc.UnimplementedTestServiceServer
	h keysHandler
}

func (a aService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	key := metadata.ValueFromIncomingContext(ctx, "idempotency-key")
	out, err := a.h(ctx, strings.Join(key, ","))
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &testgrpc.SimpleResponse{Username: out}, nil
}

// grpcA starts A over gRPC, with opts for its dedup, and returns the caller's call.
func grpcA(t *testing.T, h keysHandler, opts ...dedup.Option) call {
	return grpcServe(t, h, deadlinekit.WithDedup(dedup.NewMemoryStore(), append(opts, dedup.WithScope(scope))...))
}

// grpcServe starts h over gRPC behind the stack with opts and returns the caller's
// call (its key and tenant in metadata).
func grpcServe(t *testing.T, h keysHandler, opts ...deadlinekit.Option) call {
	gs := grpc.NewServer(deadlinekit.ServerOptions(opts...)...)
	testgrpc.RegisterTestServiceServer(gs, aService{h: h})
	cc := dial(t, serveGRPC(t, gs))
	client := testgrpc.NewTestServiceClient(cc)
	return func(key, tenant string) (string, error) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", key, "tenant", tenant)
		resp, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		return resp.GetUsername(), err
	}
}

// keysChains are the two mixes: A's protocol, then B's.
var keysChains = []struct {
	name string
	a    func(t *testing.T, h keysHandler, opts ...dedup.Option) call
	b    func(t *testing.T, b *keysB) write
}{
	{"http-grpc", httpA, grpcB},
	{"grpc-http", grpcA, httpB},
}

func mustCall(t *testing.T, c call, key, tenant string) string {
	t.Helper()
	out, err := c(key, tenant)
	if err != nil {
		t.Fatalf("key %q tenant %q: %v", key, tenant, err)
	}
	return out
}

// TestKeysTwoWrites (a): A's handler makes two different writes to B; B runs each
// once, and the caller's repeat replays A's answer without calling B.
func TestKeysTwoWrites(t *testing.T) {
	for _, ch := range keysChains {
		t.Run(ch.name, func(t *testing.T) {
			b := &keysB{}
			toB := ch.b(t, b)
			a := ch.a(t, func(ctx context.Context, _ string) (string, error) {
				r1, err := toB(ctx, "reserve 1", "")
				if err != nil {
					return "", err
				}
				r2, err := toB(ctx, "charge 5", "")
				return r1 + " " + r2, err
			})
			first := mustCall(t, a, "order-1", "")
			if first != "reserve 1#1 charge 5#2" {
				t.Fatalf("A answered %q", first)
			}
			if again := mustCall(t, a, "order-1", ""); again != first {
				t.Fatalf("the repeat got %q, want %q", again, first)
			}
			if n := b.count(); n != 2 {
				t.Fatalf("B ran %d times, want 2: %q", n, b.seen())
			}
		})
	}
}

// crashOnce is A's handler for a crash: it writes to B, and on its first run then
// "crashes": it tells dedup that nothing happened (its key is released, as when its
// replica dies and its lease ends), so the caller's repeat runs it again.
func crashOnce(toB write) keysHandler {
	var runs atomic.Int32
	return func(ctx context.Context, _ string) (string, error) {
		out, err := toB(ctx, "charge 5", "")
		if err != nil {
			return "", err
		}
		if runs.Add(1) == 1 {
			dedup.Forget(ctx)
			return "", errors.New("crashed after the write")
		}
		return out, nil
	}
}

// TestKeysCrashRerun (b): A's first run writes to B and crashes; the re-run with the
// same inbound key sends B the same key, and B replays: one charge.
func TestKeysCrashRerun(t *testing.T) {
	for _, ch := range keysChains {
		t.Run(ch.name, func(t *testing.T) {
			b := &keysB{}
			a := ch.a(t, crashOnce(ch.b(t, b)))
			if _, err := a("order-1", ""); err == nil {
				t.Fatal("the first run did not crash")
			}
			if out := mustCall(t, a, "order-1", ""); out != "charge 5#1" {
				t.Fatalf("the re-run answered %q, want B's stored answer", out)
			}
			if n := b.count(); n != 1 {
				t.Fatalf("B ran %d times, want 1: %q", n, b.seen())
			}
		})
	}
}

// TestKeysCrashRerunByDefault: keys travel without retry.WithIdempotencyKeys. A's
// handler, keyed, writes to B twice through a client stack with no option, then
// crashes; the re-run with the same inbound key sends B the same two keys (derived,
// never the caller's), and B replays both: two charges, not four.
func TestKeysCrashRerunByDefault(t *testing.T) {
	for _, ch := range []struct {
		name string
		a    func(t *testing.T, h keysHandler, opts ...dedup.Option) call
		b    func(t *testing.T, b *keysB, opts ...deadlinekit.Option) write
	}{{"http-grpc", httpA, grpcBWith}, {"grpc-http", grpcA, httpBWith}} {
		t.Run(ch.name, func(t *testing.T) {
			b := &keysB{}
			toB := ch.b(t, b)
			var runs atomic.Int32
			a := ch.a(t, func(ctx context.Context, _ string) (string, error) {
				r1, err := toB(ctx, "reserve 1", "")
				if err != nil {
					return "", err
				}
				r2, err := toB(ctx, "charge 5", "")
				if err != nil {
					return "", err
				}
				if runs.Add(1) == 1 {
					dedup.Forget(ctx) // as when its replica dies and its lease ends
					return "", errors.New("crashed after the writes")
				}
				return r1 + " " + r2, nil
			})
			if _, err := a("order-1", ""); err == nil {
				t.Fatal("the first run did not crash")
			}
			if out := mustCall(t, a, "order-1", ""); out != "reserve 1#1 charge 5#2" {
				t.Fatalf("the re-run answered %q, want B's stored answers", out)
			}
			seen := b.seen()
			if len(seen) != 2 {
				t.Fatalf("B ran %d times, want 2: %q", len(seen), seen)
			}
			for _, r := range seen {
				if k := r[strings.LastIndex(r, " ")+1:]; !strings.HasPrefix(k, "dk1.") {
					t.Fatalf("B saw %q; want derived keys on both writes", seen)
				}
			}
		})
	}
}

// TestKeysForwarded (c): A puts the inbound key on both of its writes by hand
// (forwarded metadata, a copied header), two identical "reserve 1" writes: both run,
// each under a key of its own, never the caller's.
func TestKeysForwarded(t *testing.T) {
	for _, ch := range keysChains {
		t.Run(ch.name, func(t *testing.T) {
			b := &keysB{}
			toB := ch.b(t, b)
			a := ch.a(t, func(ctx context.Context, key string) (string, error) {
				r1, err := toB(ctx, "reserve 1", key)
				if err != nil {
					return "", err
				}
				r2, err := toB(ctx, "reserve 1", key)
				return r1 + " " + r2, err
			})
			if out := mustCall(t, a, "order-1", ""); out != "reserve 1#1 reserve 1#2" {
				t.Fatalf("A answered %q, want two reservations", out)
			}
			for _, r := range b.seen() {
				if strings.Contains(r, "order-1") {
					t.Fatalf("B saw the caller's key: %q", b.seen())
				}
			}
		})
	}
}

// TestKeysTenants (d): two tenants send A the same key; A's writes to B (which knows
// nothing of A's tenants) run for both.
func TestKeysTenants(t *testing.T) {
	for _, ch := range keysChains {
		t.Run(ch.name, func(t *testing.T) {
			b := &keysB{}
			toB := ch.b(t, b)
			a := ch.a(t, func(ctx context.Context, _ string) (string, error) { return toB(ctx, "charge 5", "") })
			if out := mustCall(t, a, "order-1", "acme"); out != "charge 5#1" {
				t.Fatalf("acme got %q", out)
			}
			if out := mustCall(t, a, "order-1", "globex"); out != "charge 5#2" {
				t.Fatalf("globex got %q, want a charge of its own", out)
			}
			if n := b.count(); n != 2 {
				t.Fatalf("B ran %d times, want 2: %q", n, b.seen())
			}
		})
	}
}

// TestKeysOff (e): with dedup.WithoutKeyDerivation, A's re-run after a crash sends
// a new key, and B charges again; a forwarded key goes out as it is.
func TestKeysOff(t *testing.T) {
	for _, ch := range keysChains {
		t.Run(ch.name, func(t *testing.T) {
			b := &keysB{}
			a := ch.a(t, crashOnce(ch.b(t, b)), dedup.WithoutKeyDerivation())
			if _, err := a("order-1", ""); err == nil {
				t.Fatal("the first run did not crash")
			}
			if out := mustCall(t, a, "order-1", ""); out != "charge 5#2" {
				t.Fatalf("the re-run answered %q, want a second charge", out)
			}

			b2 := &keysB{}
			toB := ch.b(t, b2)
			fwd := ch.a(t, func(ctx context.Context, key string) (string, error) {
				return toB(ctx, "reserve 1", key)
			}, dedup.WithoutKeyDerivation())
			mustCall(t, fwd, "order-2", "")
			if r := b2.seen(); len(r) != 1 || r[0] != "reserve 1 order-2" {
				t.Fatalf("B saw %q, want the forwarded key", r)
			}
		})
	}
}
