package dedup_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/dedup"
)

// downStore is a store that fails every call at once with an UnavailableError
// saying when it tries its backend again.
type downStore struct {
	dedup.Store
	retryIn time.Duration
}

func (s downStore) Acquire(context.Context, string, dedup.Lease) (bool, dedup.Entry, error) {
	return false, dedup.Entry{}, &dedup.UnavailableError{RetryIn: s.retryIn, Err: errors.New("dial tcp: connection refused")}
}

func TestUnavailableErrorIs(t *testing.T) {
	err := error(&dedup.UnavailableError{RetryIn: time.Second, Err: context.DeadlineExceeded})
	if !errors.Is(err, dedup.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v: not ErrUnavailable and its cause", err)
	}
	if !strings.Contains(err.Error(), "1s") {
		t.Fatalf("%q does not say when", err)
	}
}

// TestStoreDownHTTP: a store that cannot be reached is a 503 that says when to come
// back (the store's next try, capped at the request's time left) and that the
// failure is not this server's, which a caller's breaker counts as neutral.
func TestStoreDownHTTP(t *testing.T) {
	ran := 0
	h := dedup.NewMiddleware(downStore{dedup.NewMemoryStore(), 300 * time.Millisecond})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran++ }))
	serve := func(ctx context.Context) *http.Response {
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/charges", strings.NewReader("1"))
		req.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Result()
	}
	r := serve(t.Context())
	if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") != "1" ||
		r.Header.Get("Grpc-Retry-Pushback-Ms") != "300" || r.Header.Get("Deadlinekit-Relayed") != "1" {
		t.Fatalf("store down: %d %v, want 503, Retry-After 1, pushback 300 ms, relayed", r.StatusCode, r.Header)
	}
	if o := breaker.Classify(breaker.Result{Response: r}); o != breaker.Neutral {
		t.Fatalf("a caller's breaker reads the 503 as %v, want neutral", o)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	r = serve(ctx)
	p, err := strconv.Atoi(r.Header.Get("Grpc-Retry-Pushback-Ms"))
	if r.StatusCode != http.StatusServiceUnavailable || err != nil || p < 1 || p > 100 {
		t.Fatalf("store down, 100 ms left: %d %v, want a pushback within the time left", r.StatusCode, r.Header)
	}
	if ran != 0 {
		t.Fatalf("the handler ran %d times without its dedup", ran)
	}
}

// TestStoreDownGRPC: the same answer over gRPC: Unavailable with the store's
// pushback and the relayed marker in the trailer.
func TestStoreDownGRPC(t *testing.T) {
	svc := &grpcCharges{}
	c := serveGRPC(t, svc, downStore{dedup.NewMemoryStore(), 300 * time.Millisecond})
	a := unary(t.Context(), c, "k", "1")
	if status.Code(a.err) != codes.Unavailable || first(a.trailer.Get("grpc-retry-pushback-ms")) != "300" ||
		first(a.trailer.Get("deadlinekit-relayed")) != "1" {
		t.Fatalf("store down: %v %v, want Unavailable, pushback 300 ms, relayed", a.err, a.trailer)
	}
	if o := breaker.Classify(breaker.Result{GRPC: true, Err: a.err, Trailer: a.trailer}); o != breaker.Neutral {
		t.Fatalf("a caller's breaker reads the refusal as %v, want neutral", o)
	}
	if svc.n.Load() != 0 {
		t.Fatalf("the handler ran %d times", svc.n.Load())
	}
}

// blinkingStore fails the first fails completions it is asked for, as a store
// that blinked (a restart, a failover) does, and counts every completion asked of
// it and when the last was.
type blinkingStore struct {
	dedup.Store
	mu    sync.Mutex
	fails int
	calls int
	last  time.Time
}

func (s *blinkingStore) Complete(ctx context.Context, key, token string, answer []byte, retain time.Duration) error {
	s.mu.Lock()
	s.calls++
	s.last = time.Now()
	fail := s.calls <= s.fails
	s.mu.Unlock()
	if fail {
		return &dedup.UnavailableError{RetryIn: 10 * time.Millisecond, Err: errors.New("connection reset by peer")}
	}
	return s.Store.Complete(ctx, key, token, answer, retain)
}

// TestAFailedCompletionIsTriedAgain: a completion the store failed is tried again
// in the background until it lands, and a repeat then gets the stored answer; one
// that never lands is tried no longer than its lease (the request's deadline plus
// the margin, or the margin from its first try), after which the key is free.
func TestAFailedCompletionIsTriedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &blinkingStore{Store: dedup.NewMemoryStore(), fails: 3}
		ran := 0
		h := dedup.NewMiddleware(s)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran++
			w.WriteHeader(http.StatusCreated)
		}))
		if r := call(h, "k", time.Second); r.Code != http.StatusCreated {
			t.Fatalf("first: %d", r.Code)
		}
		time.Sleep(100 * time.Millisecond) // the tries after 5, 10 and 20 ms
		synctest.Wait()
		if r := call(h, "k", time.Second); r.Header().Get("Idempotent-Replayed") != "true" || ran != 1 {
			t.Fatalf("repeat after the store came back: %d replayed=%q, the handler ran %d times", r.Code, r.Header().Get("Idempotent-Replayed"), ran)
		}
		if s.calls != 4 {
			t.Errorf("%d completions asked, want 4 (3 failed, 1 stored)", s.calls)
		}

		s = &blinkingStore{Store: dedup.NewMemoryStore(), fails: 1 << 30}
		ran = 0
		h = dedup.NewMiddleware(s, dedup.WithLeaseMargin(250*time.Millisecond))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran++
			w.WriteHeader(http.StatusCreated)
		}))
		start := time.Now()
		call(h, "k", time.Second)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if end := start.Add(time.Second + 250*time.Millisecond); s.last.After(end) || s.last.Before(end.Add(-200*time.Millisecond)) {
			t.Errorf("the last try was %v after the request began, want within the 200 ms before its lease ended (1.25s)", s.last.Sub(start))
		}
		if r := call(h, "k", time.Second); r.Code != http.StatusCreated || ran != 2 {
			t.Fatalf("repeat after the lease ended: %d, the handler ran %d times, want it run again", r.Code, ran)
		}
		time.Sleep(2 * time.Second) // the repeat's completion is tried until its lease ends
	})
}
