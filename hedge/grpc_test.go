package hedge_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/idempotency/idempotencytest"
)

// The test service registered below: Get has no side effects, Put is idempotent,
// Post is neither.
const (
	methodGet  = "/deadlinekit.hedgetest.Store/Get"
	methodPut  = "/deadlinekit.hedgetest.Store/Put"
	methodPost = "/deadlinekit.hedgetest.Store/Post"
)

var registerOnce sync.Once

// registerStore registers the test service in protoregistry.GlobalFiles, as
// generated code would.
func registerStore(t *testing.T) {
	t.Helper()
	registerOnce.Do(func() {
		if err := idempotencytest.Register("deadlinekit.hedgetest"); err != nil {
			panic(err)
		}
	})
}

func TestMethodIdempotent(t *testing.T) {
	registerStore(t)
	for _, tc := range []struct {
		method string
		want   bool
	}{
		{methodGet, true},
		{methodPut, true},
		{methodPost, false},
		{"/deadlinekit.hedgetest.Store/Missing", false},
		{"/deadlinekit.hedgetest.Msg/Get", false},
		{"/grpc.testing.TestService/UnaryCall", false},
		{"", false},
		{"/", false},
		{"no-slash", false},
		{"/a b/c", false},
		{"//", false},
	} {
		if got := methodHedgeable(tc.method); got != tc.want {
			t.Errorf("method %q hedgeable: %v, want %v", tc.method, got, tc.want)
		}
	}
}

// methodHedgeable reports whether hedge's interceptor takes a call of method as one
// it may hedge: whether its descriptor declares it idempotent.
func methodHedgeable(method string) bool {
	h := hedge.New()
	nop := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	_ = h.UnaryClientInterceptor()(context.Background(), method, &wrapperspb.StringValue{}, &wrapperspb.StringValue{}, nil, nop)
	return h.Stats().Primaries == 1
}

// fakeInvoker answers after latency(attempt), honouring the context, and records
// what each attempt carried.
type fakeInvoker struct {
	latency func(attempt int) (time.Duration, error)
	calls   atomic.Int64
	cut     atomic.Int64
	mu      sync.Mutex
	seen    []string // grpc-previous-rpc-attempts of each call, "" for none
}

func (f *fakeInvoker) invoke(ctx context.Context, method string, req, reply any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
	f.calls.Add(1)
	md, _ := metadata.FromOutgoingContext(ctx)
	prev := md.Get("grpc-previous-rpc-attempts")
	a := 0
	f.mu.Lock()
	if len(prev) > 0 {
		a, _ = strconv.Atoi(prev[0])
		f.seen = append(f.seen, prev[0])
	} else {
		f.seen = append(f.seen, "")
	}
	f.mu.Unlock()
	d, err := f.latency(a)
	if err := sleep(ctx, d); err != nil {
		f.cut.Add(1)
		return status.FromContextError(err).Err()
	}
	if err != nil {
		return err
	}
	reply.(*wrapperspb.StringValue).Value = "attempt " + strconv.Itoa(a)
	for _, o := range opts {
		if h, ok := o.(grpc.HeaderCallOption); ok {
			*h.HeaderAddr = metadata.Pairs("x-attempt", strconv.Itoa(a))
		}
	}
	return nil
}

func TestInterceptor(t *testing.T) {
	registerStore(t)
	slowPrimary := func(a int) (time.Duration, error) {
		if a == 0 {
			return time.Second, nil
		}
		return time.Millisecond, nil
	}
	unavailable := func(a int) (time.Duration, error) {
		if a == 0 {
			return time.Millisecond, status.Error(codes.Unavailable, "down")
		}
		return time.Millisecond, nil
	}
	internal := func(a int) (time.Duration, error) {
		return time.Millisecond, status.Error(codes.Internal, "bug")
	}
	for _, tc := range []struct {
		name      string
		method    string
		opts      []hedge.Option
		ctxMD     []string
		latency   func(int) (time.Duration, error)
		wantCalls int64
		wantReply string
		wantCode  codes.Code
		wantTook  time.Duration
	}{
		{"NO_SIDE_EFFECTS in descriptor", methodGet, nil, nil, slowPrimary, 2, "attempt 1", codes.OK, 11 * time.Millisecond},
		{"IDEMPOTENT in descriptor", methodPut, nil, nil, slowPrimary, 2, "attempt 1", codes.OK, 11 * time.Millisecond},
		{"not idempotent", methodPost, nil, nil, slowPrimary, 1, "attempt 0", codes.OK, time.Second},
		{"declared by option", methodPost, []hedge.Option{hedge.WithIdempotentMethods(methodPost)}, nil, slowPrimary, 2, "attempt 1", codes.OK, 11 * time.Millisecond},
		{"keyed write", methodPost, nil, []string{"idempotency-key", "k1"}, slowPrimary, 1, "attempt 0", codes.OK, time.Second},
		{"keyed write, WithKeyedWrites", methodPost, []hedge.Option{hedge.WithKeyedWrites()}, []string{"idempotency-key", "k1"}, slowPrimary, 2, "attempt 1", codes.OK, 11 * time.Millisecond},
		{"keyed call of an idempotent method", methodPut, nil, []string{"idempotency-key", "k1"}, slowPrimary, 2, "attempt 1", codes.OK, 11 * time.Millisecond},
		{"unknown method", "/x.Y/Z", nil, nil, slowPrimary, 1, "attempt 0", codes.OK, time.Second},
		{"UNAVAILABLE fires at once", methodGet, nil, nil, unavailable, 2, "attempt 1", codes.OK, 2 * time.Millisecond},
		{"INTERNAL is returned", methodGet, nil, nil, internal, 1, "", codes.Internal, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeInvoker{latency: tc.latency}
				h := hedge.New(append([]hedge.Option{hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond})}, tc.opts...)...)
				ic := h.UnaryClientInterceptor()
				ctx := t.Context()
				if tc.ctxMD != nil {
					ctx = metadata.AppendToOutgoingContext(ctx, tc.ctxMD...)
				}
				reply := &wrapperspb.StringValue{Value: "stale"}
				var header metadata.MD
				start := time.Now()
				err := ic(ctx, tc.method, &wrapperspb.StringValue{}, reply, nil, f.invoke, grpc.Header(&header))
				took := time.Since(start)
				synctest.Wait()
				if status.Code(err) != tc.wantCode || took != tc.wantTook || f.calls.Load() != tc.wantCalls {
					t.Errorf("err %v after %v, %d calls; want %v after %v, %d calls", err, took, f.calls.Load(), tc.wantCode, tc.wantTook, tc.wantCalls)
				}
				if tc.wantCode == codes.OK {
					if reply.Value != tc.wantReply || header.Get("x-attempt")[0] != tc.wantReply[len("attempt "):] {
						t.Errorf("reply %q, header %v; want %q from the same attempt", reply.Value, header, tc.wantReply)
					}
				}
				if tc.wantCalls == 2 && (f.seen[0] != "" || f.seen[1] != "1") {
					t.Errorf("grpc-previous-rpc-attempts = %q, want none then 1", f.seen)
				}
				st := h.Stats()
				switch {
				case tc.wantCalls == 1 && tc.wantCode == codes.OK && tc.ctxMD != nil && (st.KeyedWrites != 1 || st.NotIdempotent != 0):
					t.Errorf("stats = %+v, want KeyedWrites 1, NotIdempotent 0", st)
				case tc.wantCalls == 1 && tc.wantCode == codes.OK && tc.ctxMD == nil && st.NotIdempotent != 1:
					t.Errorf("stats = %+v, want NotIdempotent 1", st)
				}
			})
		})
	}
}

// TestInterceptorCancel: the caller's cancellation ends the call with Canceled, after
// the primary has returned.
func TestInterceptorCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeInvoker{latency: func(int) (time.Duration, error) { return time.Hour, nil }}
		ic := hedge.UnaryClientInterceptor(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}), hedge.WithIdempotentMethods(methodPost))
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(20*time.Millisecond, cancel)
		err := ic(ctx, methodPost, &wrapperspb.StringValue{}, &wrapperspb.StringValue{}, nil, f.invoke)
		synctest.Wait()
		if status.Code(err) != codes.Canceled || f.cut.Load() != 2 {
			t.Errorf("err %v, %d cut; want Canceled, both attempts cut", err, f.cut.Load())
		}
	})
}

// TestInterceptorDelay: the delay of a method comes from its own latencies.
func TestInterceptorDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeInvoker{latency: func(int) (time.Duration, error) { return 20 * time.Millisecond, nil }}
		h := hedge.New(hedge.WithIdempotentMethods(methodPost), hedge.WithDelay(hedge.Delay{MinSamples: 10}))
		ic := h.UnaryClientInterceptor()
		for range 10 {
			if err := ic(t.Context(), methodPost, &wrapperspb.StringValue{}, &wrapperspb.StringValue{}, nil, f.invoke); err != nil {
				t.Fatal(err)
			}
		}
		if d, ok := h.Delay(methodPost); !ok || d < 19*time.Millisecond || d > 21*time.Millisecond {
			t.Errorf("delay = %v, %v; want about 20ms", d, ok)
		}
	})
}

// FuzzMethodIdempotent: any method name is looked up without a panic.
func FuzzMethodIdempotent(f *testing.F) {
	for _, s := range []string{methodGet, "/", "//", "/a/b/c", "/a.b/", "/.a/b", "\x00/\xff", "/grpc.testing.TestService/UnaryCall"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, method string) {
		methodHedgeable(method)
	})
}

// TestPreviousAttemptsAddUp: beneath a retry layer that already counted attempts, a
// hedge adds to the count and sends a single value.
func TestPreviousAttemptsAddUp(t *testing.T) {
	if got := hedgeGRPCAttempts(t, "2"); len(got) != 2 || got[0] != "2" || got[1] != "3" {
		t.Errorf("grpc-previous-rpc-attempts sent: %q, want the retry's 2 then 3", got)
	}
}

// TestCallStateReuse: the state of calls that end before their hedge is reused, and a
// call whose hedge went out (a loser may still be running) is not: concurrent callers
// mixing the kinds each get their own attempt's reply and header, and the counts add
// up. Under -race, reusing the state of a call whose losing hedge still runs is
// reported.
func TestCallStateReuse(t *testing.T) {
	registerStore(t)
	synctest.Test(t, func(t *testing.T) {
		h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}), hedge.WithMaxExtraLoad(1))
		ic := h.UnaryClientInterceptor()
		var wg sync.WaitGroup
		var hedged atomic.Int64
		for g := range 8 {
			wg.Go(func() {
				for i := range 50 {
					// A third end before the delay, a third are won by the hedge, a
					// third by the primary while the hedge is still out.
					kind := (g + i) % 3
					slow := kind == 1
					f := &fakeInvoker{latency: func(a int) (time.Duration, error) {
						switch {
						case kind == 1 && a == 0, kind == 2 && a == 1:
							return time.Second, nil
						case kind == 2:
							return 15 * time.Millisecond, nil
						}
						return time.Duration(1+i%5) * time.Millisecond, nil
					}}
					reply := &wrapperspb.StringValue{Value: "stale"}
					var header metadata.MD
					if err := ic(t.Context(), methodGet, &wrapperspb.StringValue{}, reply, nil, f.invoke, grpc.Header(&header)); err != nil {
						t.Errorf("call %d/%d: %v", g, i, err)
						return
					}
					want := "attempt 0"
					if slow {
						want = "attempt 1"
						hedged.Add(1)
					}
					if reply.Value != want || len(header.Get("x-attempt")) != 1 || header.Get("x-attempt")[0] != want[len("attempt "):] {
						t.Errorf("call %d/%d: reply %q, header %v; want %q from the same attempt", g, i, reply.Value, header, want)
					}
				}
			})
		}
		wg.Wait()
		synctest.Wait()
		if st := h.Stats(); st.Primaries != 400 || int64(st.HedgeWins) != hedged.Load() || st.Hedges < st.HedgeWins {
			t.Errorf("stats %+v; want 400 primaries and %d hedge wins", st, hedged.Load())
		}
	})
}

// TestHedgerAcrossBubbles: one Hedger, made outside any synctest bubble (a
// package-level client, say), serves calls in two bubbles in turn and outside them.
// Its timers belong to the calls that armed them: a timer shared by the Hedger would
// be armed in one bubble and stopped from another, which the runtime refuses; and a
// timer made outside a bubble, reused inside one, would run on the real clock.
func TestHedgerAcrossBubbles(t *testing.T) {
	registerStore(t)
	h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}))
	ic := h.UnaryClientInterceptor()
	call := func(t *testing.T, primary time.Duration) string {
		f := &fakeInvoker{latency: func(a int) (time.Duration, error) {
			if a == 0 {
				return primary, nil
			}
			return time.Millisecond, nil
		}}
		reply := &wrapperspb.StringValue{}
		if err := ic(t.Context(), methodGet, &wrapperspb.StringValue{}, reply, nil, f.invoke); err != nil {
			t.Fatal(err)
		}
		return reply.Value
	}
	// Outside first: a call that answered in time leaves its memory (and, outside a
	// bubble, its stopped timer) for the next call, which may be in a bubble.
	for range 3 {
		if got := call(t, time.Millisecond); got != "attempt 0" {
			t.Errorf("outside a bubble, before: %q", got)
		}
	}
	for i := range 2 {
		synctest.Test(t, func(t *testing.T) {
			if got := call(t, time.Millisecond); got != "attempt 0" {
				t.Errorf("bubble %d, fast primary: %q", i, got)
			}
			if got := call(t, time.Second); got != "attempt 1" {
				t.Errorf("bubble %d, slow primary: %q", i, got)
			}
			synctest.Wait()
		})
	}
	if got := call(t, time.Millisecond); got != "attempt 0" {
		t.Errorf("outside a bubble: %q", got)
	}
}
