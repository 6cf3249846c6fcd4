package retry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/retry"
)

// keyLog is a downstream that records the key of every request it gets, by path,
// and answers the first request to /flaky after each take 503.
type keyLog struct {
	mu    sync.Mutex
	keys  []string // "METHOD path key"
	flaky bool
}

func (l *keyLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys = append(l.keys, r.Method+" "+r.URL.Path+" "+r.Header.Get("Idempotency-Key"))
	if r.URL.Path == "/flaky" && !l.flaky {
		l.flaky = true
		w.WriteHeader(http.StatusServiceUnavailable)
	}
}

func (l *keyLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.keys
	l.keys, l.flaky = nil, false
	return k
}

// TestKeysDerivedHTTP: under a keyed request's run (dedup), the transport's writes
// get keys derived from the request's key, the same on a re-run; every attempt of
// one write shares its key; safe and idempotent methods get none; a key of the
// handler's own is kept, and the request's own key, forwarded in any form, is
// replaced.
func TestKeysDerivedHTTP(t *testing.T) {
	down := &keyLog{}
	ds := httptest.NewServer(down)
	defer ds.Close()
	client := &http.Client{Transport: retry.NewTransport(nil, retry.WithIdempotencyKeys(func() string { return "generated" }), retry.WithBackoff(retry.Backoff{}))}
	send := func(ctx context.Context, method, path, key string) {
		req, _ := http.NewRequestWithContext(ctx, method, ds.URL+path, strings.NewReader("x"))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
	}
	front := httptest.NewServer(dedup.NewMiddleware(dedup.NewMemoryStore())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		send(ctx, http.MethodPost, "/a", "")
		send(ctx, http.MethodGet, "/get", "")
		send(ctx, http.MethodPut, "/put", "")
		send(ctx, http.MethodPost, "/flaky", "")
		send(ctx, http.MethodPost, "/own", "mine")
		send(ctx, http.MethodPost, "/fwd", r.Header.Get("Idempotency-Key"))
		send(ctx, http.MethodPut, "/fwd-put", `"order-1"`)
		dedup.Forget(ctx) // so that the next request runs again
	})))
	defer front.Close()
	run := func(key string) []string {
		req, _ := http.NewRequest(http.MethodPost, front.URL, nil)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return down.take()
	}
	first, again := run(" order-1"), run(`"order-1"`) // one key, in two forms
	if strings.Join(first, "\n") != strings.Join(again, "\n") {
		t.Fatalf("a re-run sent other keys:\n%q\n%q", first, again)
	}
	key := func(i int) string { return first[i][strings.LastIndexByte(first[i], ' ')+1:] }
	if len(first) != 8 {
		t.Fatalf("downstream saw %q", first)
	}
	k := map[string]string{"a": key(0), "get": key(1), "put": key(2), "flaky": key(3), "flaky2": key(4), "own": key(5), "fwd": key(6), "fwd-put": key(7)}
	if k["get"] != "" || k["put"] != "" || k["own"] != "mine" || k["flaky"] != k["flaky2"] {
		t.Fatalf("keys %q", k)
	}
	for _, n := range []string{"a", "flaky", "fwd", "fwd-put"} {
		if !strings.HasPrefix(k[n], "dk1.") {
			t.Fatalf("%s: key %q, want a derived one", n, k[n])
		}
	}
	if k["a"] == k["flaky"] || k["flaky"] == k["fwd"] || k["fwd"] == k["fwd-put"] {
		t.Fatalf("two writes share a key: %q", k)
	}
	// Without a key, nothing is derived: the writes get the generator's keys.
	if got := run(""); got[0] != "POST /a generated" || got[6] != "POST /fwd generated" {
		t.Fatalf("an unkeyed request's writes: %q", got)
	}
}

// TestKeysDerivedGRPC: under a keyed request's run, a gRPC call to a method that
// is not declared idempotent gets a derived key, and one declared idempotent the
// generator's; forwarded incoming metadata carries a derived key, not the caller's.
func TestKeysDerivedGRPC(t *testing.T) {
	var keys []string
	invoker := func(ctx context.Context, method string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		keys = append(keys, strings.Join(metadata.ValueFromOutgoingContext(ctx, "idempotency-key"), ","))
		return nil
	}
	client := retry.UnaryClientInterceptor(retry.WithIdempotencyKeys(func() string { return "generated" }), retry.WithIdempotentMethods("/s/Read"))
	server := dedup.UnaryServerInterceptor(dedup.NewMemoryStore())
	run := func() []string {
		keys = nil
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", "order-1"))
		_, err := server(ctx, &emptypb.Empty{}, &grpc.UnaryServerInfo{FullMethod: "/s/Front"}, func(ctx context.Context, _ any) (any, error) {
			for _, m := range []string{"/s/Write", "/s/Read", "/s/Write"} {
				if err := client(ctx, m, nil, nil, nil, invoker); err != nil {
					return nil, err
				}
			}
			md, _ := metadata.FromIncomingContext(ctx)
			if err := client(metadata.NewOutgoingContext(ctx, md), "/s/Write", nil, nil, nil, invoker); err != nil {
				return nil, err
			}
			dedup.Forget(ctx)
			return &emptypb.Empty{}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	first, again := run(), run()
	if strings.Join(first, " ") != strings.Join(again, " ") {
		t.Fatalf("a re-run sent other keys: %q, %q", first, again)
	}
	if len(first) != 4 || first[1] != "generated" || first[0] == first[2] || first[2] == first[3] {
		t.Fatalf("keys %q", first)
	}
	for _, i := range []int{0, 2, 3} {
		if !strings.HasPrefix(first[i], "dk1.") {
			t.Fatalf("keys %q: call %d's is not derived", first, i)
		}
	}
}
