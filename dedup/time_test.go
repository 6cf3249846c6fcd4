package dedup_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/otelattr"
)

// call runs one keyed POST through h in-process, with timeout on its context (zero:
// none).
func call(h http.Handler, key string, timeout time.Duration) *httptest.ResponseRecorder {
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/charges", strings.NewReader("100"))
	req.Header.Set("Idempotency-Key", key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		h := dedup.NewMiddleware(dedup.NewMemoryStore(), dedup.WithRetention(time.Hour))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, n.Add(1))
		}))
		call(h, "k", 0)
		time.Sleep(time.Hour - time.Second)
		if r := call(h, "k", 0); r.Header().Get("Idempotent-Replayed") != "true" || r.Body.String() != "1" {
			t.Fatalf("within retention: %q replayed=%q", r.Body, r.Header().Get("Idempotent-Replayed"))
		}
		time.Sleep(time.Second)
		if r := call(h, "k", 0); r.Body.String() != "2" {
			t.Fatalf("after retention: %q, want a new execution", r.Body)
		}
	})
}

// blocker is a handler whose first execution blocks until its context ends or
// release is closed, then does what then says.
type blocker struct {
	n       atomic.Int64
	release chan struct{}
	then    func(w http.ResponseWriter, r *http.Request)
}

func (b *blocker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := b.n.Add(1)
	if n == 1 {
		select {
		case <-b.release:
		case <-r.Context().Done():
		}
		if b.then != nil {
			b.then(w, r)
			return
		}
	}
	w.WriteHeader(http.StatusCreated)
	fmt.Fprint(w, n)
}

func TestRepeatWaitsForTheFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &blocker{release: make(chan struct{})}
		h := dedup.NewMiddleware(dedup.NewMemoryStore())(b)
		go call(h, "k", 10*time.Second)
		synctest.Wait()
		start := time.Now()
		go func() { time.Sleep(3 * time.Second); close(b.release) }()
		r := call(h, "k", 5*time.Second)
		if r.Code != 201 || r.Header().Get("Idempotent-Replayed") != "true" || r.Body.String() != "1" {
			t.Fatalf("repeat: %d %q", r.Code, r.Body)
		}
		if w := time.Since(start); w != 3*time.Second {
			t.Fatalf("repeat waited %v, want 3s (until the first answered)", w)
		}
	})
}

func TestRepeatNeverWaitsPastItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &blocker{release: make(chan struct{})}
		h := dedup.NewMiddleware(dedup.NewMemoryStore())(b)
		go call(h, "k", 10*time.Second)
		synctest.Wait()
		time.Sleep(time.Second)
		start := time.Now()
		r := call(h, "k", 2*time.Second)
		if w := time.Since(start); w != 2*time.Second-20*time.Millisecond {
			t.Errorf("repeat waited %v, want its budget less the floor (1.98s)", w)
		}
		if r.Code != http.StatusConflict {
			t.Errorf("repeat: %d, want 409", r.Code)
		}
		// The first's deadline (10s) is 10s − 2.98s away: come back then, not at
		// the end of its lease (the margin past it is for a late answer to be
		// stored, not for the repeat to wait out).
		if got := r.Header().Get("Grpc-Retry-Pushback-Ms"); got != "7020" {
			t.Errorf("pushback %q, want 7020", got)
		}
		if got := r.Header().Get("Retry-After"); got != "8" {
			t.Errorf("Retry-After %q, want 8", got)
		}
		close(b.release)
		synctest.Wait()
	})
}

// TestComeBackIsTheFirstsTimeLeft: the come-back of a 409 is the first request's
// time left until its deadline, whether the repeat waited or had no time to, and
// at least 1 ms once that deadline has passed (the first still runs within its
// lease's margin).
func TestComeBackIsTheFirstsTimeLeft(t *testing.T) {
	for _, tc := range []struct {
		name       string
		first      time.Duration // the first's budget
		after      time.Duration // when the repeat comes
		budget     time.Duration // the repeat's
		took       time.Duration // the repeat's wait
		pushback   string
		retryAfter string
	}{
		{"no time to wait", 3 * time.Second, 500 * time.Millisecond, 15 * time.Millisecond, 0, "2500", "3"},
		{"waited", 3 * time.Second, 500 * time.Millisecond, 500 * time.Millisecond, 480 * time.Millisecond, "2020", "3"},
		{"first past its deadline", time.Second, 1100 * time.Millisecond, 500 * time.Millisecond, 480 * time.Millisecond, "1", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				stuck := make(chan struct{}) // the first ignores its deadline
				var n atomic.Int64
				h := dedup.NewMiddleware(dedup.NewMemoryStore(), dedup.WithLeaseMargin(time.Second))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if n.Add(1) == 1 {
						<-stuck
					}
					w.WriteHeader(http.StatusCreated)
				}))
				go call(h, "k", tc.first)
				synctest.Wait()
				time.Sleep(tc.after)
				start := time.Now()
				r := call(h, "k", tc.budget)
				if took := time.Since(start); r.Code != http.StatusConflict || took != tc.took {
					t.Errorf("repeat: %d after %v, want 409 after %v", r.Code, took, tc.took)
				}
				if got := r.Header().Get("Grpc-Retry-Pushback-Ms"); got != tc.pushback {
					t.Errorf("pushback %q, want %s", got, tc.pushback)
				}
				if got := r.Header().Get("Retry-After"); got != tc.retryAfter {
					t.Errorf("Retry-After %q, want %s", got, tc.retryAfter)
				}
				close(stuck)
				synctest.Wait()
			})
		})
	}
}

// TestRepeatKeepsTheRefusalReserve: a floor below dedup.MinRefusalReserve (the
// root stack gives 1 ms) still keeps the reserve for the refusal's way back.
func TestRepeatKeepsTheRefusalReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &blocker{release: make(chan struct{})}
		h := dedup.NewMiddleware(dedup.NewMemoryStore(), dedup.WithFloor(time.Millisecond))(b)
		go call(h, "k", 10*time.Second)
		synctest.Wait()
		start := time.Now()
		r := call(h, "k", time.Second)
		if w := time.Since(start); w != time.Second-dedup.MinRefusalReserve {
			t.Errorf("repeat waited %v, want its budget less dedup.MinRefusalReserve (990ms)", w)
		}
		if r.Code != http.StatusConflict {
			t.Errorf("repeat: %d, want 409", r.Code)
		}
		close(b.release)
		synctest.Wait()
	})
}

func TestWaitingRepeatTakesOver(t *testing.T) {
	for _, tc := range []struct {
		name string
		then func(w http.ResponseWriter, r *http.Request)
	}{
		{"Forget", func(w http.ResponseWriter, r *http.Request) { dedup.Forget(r.Context()); w.WriteHeader(502) }},
		{"panic", func(w http.ResponseWriter, r *http.Request) { panic("boom") }},
		{"deadline", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &blocker{release: make(chan struct{}), then: tc.then}
				if tc.name == "deadline" {
					b.then = func(w http.ResponseWriter, r *http.Request) {} // returns at its deadline, nothing written
				}
				h := dedup.NewMiddleware(dedup.NewMemoryStore())(b)
				panicked := make(chan any, 1)
				go func() {
					defer func() { panicked <- recover() }()
					call(h, "k", 2*time.Second)
				}()
				synctest.Wait()
				if tc.name != "deadline" {
					go func() { time.Sleep(time.Second); close(b.release) }()
				}
				r := call(h, "k", 10*time.Second)
				if r.Code != 201 || r.Body.String() != "2" || r.Header().Get("Idempotent-Replayed") != "" {
					t.Fatalf("waiting repeat: %d %q replayed=%q, want it to run", r.Code, r.Body, r.Header().Get("Idempotent-Replayed"))
				}
				p := <-panicked
				if (tc.name == "panic") != (p != nil) {
					t.Fatalf("the first's panic: %v", p)
				}
			})
		})
	}
}

func TestLeaseEndsWithTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A handler that never returns (a dead replica in one process).
		stuck := make(chan struct{})
		var n atomic.Int64
		h := dedup.NewMiddleware(dedup.NewMemoryStore())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				<-stuck
				return
			}
			w.WriteHeader(201)
		}))
		go call(h, "k", time.Second)
		synctest.Wait()
		// Before the first's deadline plus margin: waits, then 409.
		if r := call(h, "k", 500*time.Millisecond); r.Code != http.StatusConflict {
			t.Fatalf("repeat before the lease ended: %d, want 409", r.Code)
		}
		time.Sleep(2 * time.Second)
		if r := call(h, "k", time.Second); r.Code != 201 {
			t.Fatalf("repeat after the lease ended: %d, want 201", r.Code)
		}
		close(stuck)
		synctest.Wait()
	})
}

// TestLeaseHoldsTheMarginPastTheDeadline: the lease of a first request that never
// returns ends the default margin (250 ms) after its deadline; a repeat that
// waits for it then takes the key over and runs.
func TestLeaseHoldsTheMarginPastTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stuck := make(chan struct{})
		var n atomic.Int64
		h := dedup.NewMiddleware(dedup.NewMemoryStore())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				<-stuck
			}
			w.WriteHeader(http.StatusCreated)
		}))
		go call(h, "k", time.Second)
		synctest.Wait()
		time.Sleep(time.Second) // the first's deadline
		start := time.Now()
		r := call(h, "k", time.Second)
		if took := time.Since(start); r.Code != http.StatusCreated || took != 250*time.Millisecond {
			t.Errorf("repeat: %d after %v, want 201 after the margin (250ms)", r.Code, took)
		}
		close(stuck)
		synctest.Wait()
	})
}

func TestNoDeadlineHoldsTheDefaultBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := dedup.NewMemoryStore()
		b := &blocker{release: make(chan struct{})}
		h := dedup.NewMiddleware(store)(b)
		go call(h, "k", 0)
		synctest.Wait()
		time.Sleep(time.Second)
		r := call(h, "k", 100*time.Millisecond)
		if got := r.Header().Get("Grpc-Retry-Pushback-Ms"); r.Code != 409 || got != "28920" {
			t.Errorf("%d pushback %q, want 409 with 30s − 1.08s", r.Code, got)
		}
		close(b.release)
		synctest.Wait()
	})
}

func TestCompletedAfterTheDeadlineIsStored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		h := dedup.NewMiddleware(dedup.NewMemoryStore())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			time.Sleep(1200 * time.Millisecond) // past its 1s deadline, within the lease's margin (250 ms)
			w.WriteHeader(201)
		}))
		call(h, "k", time.Second)
		if r := call(h, "k", time.Second); r.Header().Get("Idempotent-Replayed") != "true" || n.Load() != 1 {
			t.Fatalf("repeat: %d replayed=%q, ran %d", r.Code, r.Header().Get("Idempotent-Replayed"), n.Load())
		}
	})
}

func TestMemoryStoreBounds(t *testing.T) {
	ctx := context.Background()
	s := dedup.NewMemoryStore(dedup.WithMaxEntries(32*4), dedup.WithMaxBytes(32*1000))
	for i := range 10_000 {
		k := fmt.Sprint("k", i)
		ok, _, err := s.Acquire(ctx, k, dedup.Lease{Token: "t", Fingerprint: "f", TTL: time.Minute})
		if err != nil || !ok {
			t.Fatalf("acquire %d: %v %v", i, ok, err)
		}
		if err := s.Complete(ctx, k, "t", make([]byte, 100), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	if st.Entries > 32*4 || st.Bytes > 32*1000 || st.Evicted == 0 {
		t.Fatalf("stats %+v, want within bounds and evictions", st)
	}
	// An answer larger than its share of the bytes is refused.
	s.Acquire(ctx, "big", dedup.Lease{Token: "t", Fingerprint: "f", TTL: time.Minute})
	if err := s.Complete(ctx, "big", "t", make([]byte, 2000), time.Hour); err != dedup.ErrAnswerTooLarge {
		t.Fatalf("big answer: %v", err)
	}
	// Leases alone fill it: refused, not evicted.
	full := dedup.NewMemoryStore(dedup.WithMaxEntries(1))
	var refused int
	for i := range 100 {
		if _, _, err := full.Acquire(ctx, fmt.Sprint(i), dedup.Lease{Token: "t", TTL: time.Minute}); err == dedup.ErrStoreFull {
			refused++
		}
	}
	if refused == 0 {
		t.Fatal("a store full of leases took more")
	}
}

func TestMemoryStoreTokens(t *testing.T) {
	ctx := context.Background()
	s := dedup.NewMemoryStore()
	s.Acquire(ctx, "k", dedup.Lease{Token: "a", Fingerprint: "f", TTL: time.Minute})
	if err := s.Complete(ctx, "k", "b", []byte("x"), time.Hour); err != dedup.ErrLeaseLost {
		t.Fatalf("complete with another token: %v", err)
	}
	if err := s.Release(ctx, "k", "b"); err != dedup.ErrLeaseLost {
		t.Fatalf("release with another token: %v", err)
	}
	if e, _ := s.Get(ctx, "k"); e.State != dedup.Running {
		t.Fatalf("state %v", e.State)
	}
}

// TestMemoryStoreConcurrency hammers one store from many goroutines: every key is
// acquired by exactly one of its contenders.
func TestMemoryStoreConcurrency(t *testing.T) {
	ctx := context.Background()
	s := dedup.NewMemoryStore()
	const keys, contenders = 200, 16
	var won [keys]atomic.Int64
	var wg sync.WaitGroup
	testkit.Parallel(8, keys*contenders, func(i int) {
		k := fmt.Sprint("k", i%keys)
		tok := fmt.Sprint(i)
		ok, _, err := s.Acquire(ctx, k, dedup.Lease{Token: tok, Fingerprint: "f", TTL: time.Minute})
		if err != nil {
			t.Error(err)
			return
		}
		if ok {
			won[i%keys].Add(1)
			if i%2 == 0 {
				_ = s.Complete(ctx, k, tok, []byte("answer"), time.Hour)
			}
			return
		}
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			defer cancel()
			_, _ = s.Wait(wctx, k)
		})
	})
	wg.Wait()
	for i := range won {
		if won[i].Load() != 1 {
			t.Fatalf("key %d acquired %d times", i, won[i].Load())
		}
	}
}

// TestTheWaitOnTheSpan: a repeat that waited for the first request tells it on its
// server span, with an event "waited for the first request" and how long; one
// refused because the first outlasted it names when the first's lease ends
// (deadlinekit.dedup.holder_left_ms).
func TestTheWaitOnTheSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		b := &blocker{release: make(chan struct{})}
		h := dedup.NewMiddleware(dedup.NewMemoryStore())(b)
		traced := func(key string, timeout time.Duration) {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			ctx, span := tp.Tracer("test").Start(ctx, "server "+key)
			defer span.End()
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/charges", strings.NewReader("100"))
			req.Header.Set("Idempotency-Key", key)
			h.ServeHTTP(httptest.NewRecorder(), req)
		}
		go call(h, "k", 10*time.Second)
		synctest.Wait()
		time.Sleep(time.Second)
		traced("k", 2*time.Second) // refused at 2.98s: the lease ends at 10.25s
		go func() { time.Sleep(time.Second); close(b.release) }()
		traced("k", 5*time.Second) // waits 1s, then gets the answer

		spans := sr.Ended()
		if len(spans) != 2 {
			t.Fatalf("%d spans", len(spans))
		}
		testkit.WantAttrs(t, spans[0], otelattr.DedupOutcomeKey.String("conflict"), otelattr.DedupHolderLeftKey.Float64(7270))
		testkit.WantAttrs(t, spans[1], otelattr.DedupOutcomeKey.String("waited"))
		if _, ok := testkit.Attrs(spans[1])[otelattr.DedupHolderLeftKey]; ok {
			t.Errorf("a repeat that got the answer names the holder's lease")
		}
		for i, want := range []float64{1980, 1000} {
			var waits []float64
			for _, e := range spans[i].Events() {
				if e.Name == otelattr.DedupWaitedEvent {
					for _, kv := range e.Attributes {
						if kv.Key == otelattr.DedupWaitKey {
							waits = append(waits, kv.Value.AsFloat64())
						}
					}
				}
			}
			if len(waits) != 1 || waits[0] != want {
				t.Errorf("span %d: waits %v on %q events, want one of %v ms", i, waits, otelattr.DedupWaitedEvent, want)
			}
		}
	})
}

// trailerStream is the server stream grpc.SetTrailer writes to, for an interceptor
// called in-process.
type trailerStream struct {
	mu      sync.Mutex
	trailer metadata.MD
}

func (s *trailerStream) Method() string               { return "/grpc.testing.TestService/UnaryCall" }
func (s *trailerStream) SetHeader(metadata.MD) error  { return nil }
func (s *trailerStream) SendHeader(metadata.MD) error { return nil }
func (s *trailerStream) SetTrailer(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

// TestGRPCAbortedInsideItsBudget: over gRPC too, a waiting repeat is refused
// Aborted dedup.MinRefusalReserve before its deadline (under a floor of 1 ms), with
// the pushback of the first's time left until its deadline.
func TestGRPCAbortedInsideItsBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var n atomic.Int64
		handler := func(ctx context.Context, req any) (any, error) {
			if n.Add(1) == 1 {
				<-release
			}
			return &testgrpc.SimpleResponse{Username: "charged"}, nil
		}
		icpt := dedup.UnaryServerInterceptor(dedup.NewMemoryStore(), dedup.WithFloor(time.Millisecond))
		info := &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/UnaryCall"}
		send := func(timeout time.Duration) (metadata.MD, time.Duration, error) {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			st := &trailerStream{}
			ctx = grpc.NewContextWithServerTransportStream(metadata.NewIncomingContext(ctx, metadata.Pairs("idempotency-key", "k")), st)
			start := time.Now()
			_, err := icpt(ctx, &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte("100")}}, info, handler)
			return st.trailer, time.Since(start), err
		}
		first := make(chan error)
		go func() { _, _, err := send(3 * time.Second); first <- err }()
		synctest.Wait()
		time.Sleep(500 * time.Millisecond)
		trailer, took, err := send(time.Second)
		if status.Code(err) != codes.Aborted || took != time.Second-dedup.MinRefusalReserve {
			t.Errorf("repeat: %v after %v, want Aborted after 990ms", err, took)
		}
		// The first's deadline is 3s − 1.49s away.
		if got := trailer.Get("grpc-retry-pushback-ms"); len(got) != 1 || got[0] != "1510" {
			t.Errorf("pushback %v, want 1510", got)
		}
		close(release)
		if err := <-first; err != nil {
			t.Errorf("first: %v", err)
		}
	})
}
