package dedup_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/deadlinekit/deadlinekit/dedup"
)

// derivedKeys serves requests under dedup with opts through a handler that
// reports DerivedKey(ctx, "a") and DerivedKey(ctx, "b") and then releases its key
// (dedup.Forget: the next request runs again), and returns what one request with
// key (none when empty) saw.
func derivedKeys(t *testing.T, opts ...dedup.Option) func(key string) string {
	t.Helper()
	var seen string
	h := dedup.NewMiddleware(dedup.NewMemoryStore(), opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = dedup.DerivedKey(r.Context(), "a") + " " + dedup.DerivedKey(r.Context(), "b")
		dedup.Forget(r.Context())
	}))
	return func(key string) string {
		seen = "not run"
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("x"))
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		return seen
	}
}

// TestDerivedKey: a labelled key is the same on every run of one key in one scope,
// differs between labels, keys and scopes, and is "" without a key or with
// WithoutKeyDerivation.
func TestDerivedKey(t *testing.T) {
	if k := dedup.DerivedKey(context.Background(), "a"); k != "" {
		t.Fatalf("outside dedup: %q", k)
	}
	keyed := derivedKeys(t)
	first := keyed("k1")
	a, b, _ := strings.Cut(first, " ")
	if !strings.HasPrefix(a, "dk1.") || a == b || len(a) > dedup.MaxKeyLength {
		t.Fatalf("labels a and b: %q", first)
	}
	if again := keyed(`"k1"`); again != first {
		t.Fatalf("a re-run of k1 (quoted) derived %q, the first %q", again, first)
	}
	if other := keyed("k2"); other == first || strings.Contains(other, a) {
		t.Fatalf("k2 derived %q, k1 %q", other, first)
	}
	if none := keyed(""); none != " " {
		t.Fatalf("without a key: %q", none)
	}
	if off := derivedKeys(t, dedup.WithoutKeyDerivation())("k1"); off != " " {
		t.Fatalf("WithoutKeyDerivation: %q", off)
	}
}

// TestDerivedKeyScoped: two scopes with one key derive different keys, over gRPC.
func TestDerivedKeyScoped(t *testing.T) {
	icpt := dedup.UnaryServerInterceptor(dedup.NewMemoryStore(), dedup.WithScope(func(ctx context.Context) string {
		return metadata.ValueFromIncomingContext(ctx, "tenant")[0]
	}))
	derive := func(tenant string) string {
		var k string
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", "k1", "tenant", tenant))
		_, err := icpt(ctx, &emptypb.Empty{}, &grpc.UnaryServerInfo{FullMethod: "/s/M"}, func(ctx context.Context, _ any) (any, error) {
			k = dedup.DerivedKey(ctx, "a")
			return &emptypb.Empty{}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	acme, globex := derive("acme"), derive("globex")
	if acme == "" || acme == globex || strings.Contains(acme, "acme") {
		t.Fatalf("acme %q, globex %q", acme, globex)
	}
	if replay := derive("acme"); replay != "" {
		t.Fatalf("a replay ran the handler, and derived %q", replay)
	}
}

func ExampleDerivedKey() {
	reserve := func(ctx context.Context, item string) {
		// Sent from a goroutine of its own: its place among the handler's writes is
		// not fixed, so it gets a key of its own, the same on every run.
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://inventory/reservations", strings.NewReader(item))
		req.Header.Set("Idempotency-Key", dedup.DerivedKey(ctx, "reserve:"+item))
		fmt.Println(req.Header.Get("Idempotency-Key") != "")
	}
	h := dedup.NewMiddleware(dedup.NewMemoryStore())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reserve(r.Context(), "book-42")
	}))
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("order"))
	r.Header.Set("Idempotency-Key", "order-7")
	h.ServeHTTP(httptest.NewRecorder(), r)
	// Output: true
}
