package connectkit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/retry"
)

// keysChain is caller → A → B, connect all the way, both with dedup. B counts its
// executions and the keys they came with; A's handler is a, given its client of B.
func keysChain(t *testing.T, proto connect.ClientOption, a func(b *connect.Client[msg, msg]) handlerFunc, opts ...dedup.Option) (call func(key string) (string, error), runs func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	bURL, bHC := serve(t, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, req.Msg.GetValue()+" "+req.Header().Get("Idempotency-Key"))
		return connect.NewResponse(wrapperspb.String(fmt.Sprintf("%s#%d", req.Msg.GetValue(), len(seen)))), nil
	}, connectkit.HandlerOption(deadlinekit.WithDedup(dedup.NewMemoryStore())))
	toB := client(bHC, bURL, procPost, proto, connectkit.ClientOption(deadlinekit.WithRetry(retry.WithIdempotencyKeys(nil))))
	aURL, aHC := serve(t, a(toB), connectkit.HandlerOption(deadlinekit.WithDedup(dedup.NewMemoryStore(), opts...)))
	toA := client(aHC, aURL, procPost, proto)
	call = func(key string) (string, error) {
		req := connect.NewRequest(wrapperspb.String("order"))
		req.Header().Set("Idempotency-Key", key)
		resp, err := toA.CallUnary(context.Background(), req)
		if err != nil {
			return "", err
		}
		return resp.Msg.GetValue(), nil
	}
	return call, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// writeB is one write of A to B, with the key forward copied into its header by
// hand when not empty.
func writeB(ctx context.Context, b *connect.Client[msg, msg], body, forward string) (string, error) {
	req := connect.NewRequest(wrapperspb.String(body))
	if forward != "" {
		req.Header().Set("Idempotency-Key", forward)
	}
	resp, err := b.CallUnary(ctx, req)
	if err != nil {
		return "", err
	}
	return resp.Msg.GetValue(), nil
}

// TestKeysTravelCrashRerun: A writes to B and then crashes (dedup.Forget, as when
// its lease ends); the caller's repeat runs A again, whose write carries the key it
// carried the first time, and B replays: one execution.
func TestKeysTravelCrashRerun(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			var n atomic.Int32
			call, runs := keysChain(t, p.opt, func(b *connect.Client[msg, msg]) handlerFunc {
				return func(ctx context.Context, _ *connect.Request[msg]) (*connect.Response[msg], error) {
					out, err := writeB(ctx, b, "charge 5", "")
					if err != nil {
						return nil, err
					}
					if n.Add(1) == 1 {
						dedup.Forget(ctx)
						return nil, connect.NewError(connect.CodeInternal, errors.New("crashed after the write"))
					}
					return connect.NewResponse(wrapperspb.String(out)), nil
				}
			})
			if _, err := call("order-1"); err == nil {
				t.Fatal("the first run did not crash")
			}
			if out, err := call("order-1"); err != nil || out != "charge 5#1" {
				t.Fatalf("the re-run: %q, %v; want B's stored answer", out, err)
			}
			if r := runs(); len(r) != 1 {
				t.Fatalf("B ran %d times, want 1: %q", len(r), r)
			}
		})
	}
}

// TestKeysTravelCopiedHeader: A copies the caller's key into the header of two
// identical writes: both run, neither under the caller's key.
func TestKeysTravelCopiedHeader(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			call, runs := keysChain(t, p.opt, func(b *connect.Client[msg, msg]) handlerFunc {
				return func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
					key := req.Header().Get("Idempotency-Key")
					r1, err := writeB(ctx, b, "reserve 1", key)
					if err != nil {
						return nil, err
					}
					r2, err := writeB(ctx, b, "reserve 1", key)
					if err != nil {
						return nil, err
					}
					return connect.NewResponse(wrapperspb.String(r1 + " " + r2)), nil
				}
			})
			if out, err := call("order-1"); err != nil || out != "reserve 1#1 reserve 1#2" {
				t.Fatalf("A answered %q, %v; want two reservations", out, err)
			}
			for _, r := range runs() {
				if strings.HasSuffix(r, " order-1") {
					t.Fatalf("B saw the caller's key: %q", runs())
				}
			}
		})
	}
}

// TestKeysTravelOwnKeyKept: a key of A's own choosing in a write's header
// (dedup.DerivedKey, for writes whose order is not fixed) goes to B as it is, and
// the write carries it on every run.
func TestKeysTravelOwnKeyKept(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			var mu sync.Mutex
			var own []string
			call, runs := keysChain(t, p.opt, func(b *connect.Client[msg, msg]) handlerFunc {
				return func(ctx context.Context, _ *connect.Request[msg]) (*connect.Response[msg], error) {
					key := dedup.DerivedKey(ctx, "reserve")
					mu.Lock()
					own = append(own, key)
					mu.Unlock()
					out, err := writeB(ctx, b, "reserve 1", key)
					if err != nil {
						return nil, err
					}
					dedup.Forget(ctx) // a re-run for each call
					return connect.NewResponse(wrapperspb.String(out)), nil
				}
			})
			for range 2 {
				if out, err := call("order-1"); err != nil || out != "reserve 1#1" {
					t.Fatalf("A answered %q, %v; want B's first answer", out, err)
				}
			}
			r := runs()
			mu.Lock()
			defer mu.Unlock()
			if len(own) != 2 || own[0] == "" || own[0] != own[1] || len(r) != 1 || r[0] != "reserve 1 "+own[0] {
				t.Fatalf("A chose %q, B saw %q", own, r)
			}
		})
	}
}
