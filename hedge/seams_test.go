package hedge_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/metrictest"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
)

// step is what one copy of a call meets: after a wait (cut short by its context),
// an HTTP status or a gRPC code, with a pushback, or an error.
type step struct {
	after    time.Duration
	code     int // HTTP status
	grpc     codes.Code
	pushback string // grpc-retry-pushback-ms, when set
	err      error
}

// stepTransport answers copy n of a request as steps[n] says, and counts what
// reaches it.
type stepTransport struct {
	steps []step
	n     atomic.Int64
}

func (b *stepTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	b.n.Add(1)
	s := b.steps[attemptOf(r)]
	if err := sleep(r.Context(), s.after); err != nil {
		return nil, err
	}
	if s.err != nil {
		return nil, s.err
	}
	resp := response(r, s.code, nil)
	if s.pushback != "" {
		resp.Header.Set("Grpc-Retry-Pushback-Ms", s.pushback)
	}
	return resp, nil
}

// stepInvoker is stepTransport for gRPC: a success writes "attempt n" into the reply;
// a pushback goes into the trailer the call asked for.
type stepInvoker struct {
	steps []step
	n     atomic.Int64
}

func (f *stepInvoker) invoke(ctx context.Context, _ string, _, reply any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
	f.n.Add(1)
	a := 0
	if vs := metadata.ValueFromOutgoingContext(ctx, "grpc-previous-rpc-attempts"); len(vs) > 0 {
		a = int(vs[0][0] - '0')
	}
	s := f.steps[a]
	if err := sleep(ctx, s.after); err != nil {
		return status.FromContextError(err).Err()
	}
	if s.pushback != "" {
		for _, o := range opts {
			if t, ok := o.(grpc.TrailerCallOption); ok {
				*t.TrailerAddr = metadata.Pairs("grpc-retry-pushback-ms", s.pushback)
			}
		}
	}
	if s.err != nil {
		return s.err
	}
	if s.grpc != codes.OK {
		return status.Errorf(s.grpc, "attempt %d", a)
	}
	reply.(*wrapperspb.StringValue).Value = "attempt " + string(rune('0'+a))
	return nil
}

// traced returns a context whose span records, and the provider of its spans.
func traced(ctx context.Context) (context.Context, *fakeProvider) {
	tp := &fakeProvider{}
	return trace.ContextWithSpan(ctx, tp.newSpan("caller")), tp
}

// only returns the one span called name, failing the test when there is not one.
func only(t *testing.T, tp *fakeProvider, name string) *fakeSpan {
	t.Helper()
	s := tp.named(name)
	if len(s) != 1 {
		t.Fatalf("%d spans %q; want 1", len(s), name)
	}
	return s[0]
}

// hedgeWins reads the deadlinekit.hedge.wins counter.
func hedgeWins(t *testing.T) int64 {
	t.Helper()
	return int64(metrictest.Total(t, metrictest.Global(), "deadlinekit.hedge.wins"))
}

var errBudget = &deadline.BudgetError{Remaining: 15 * time.Millisecond, Needed: 20 * time.Millisecond}

// TestFirstAnswerWins: the call ends at the first answer, whichever copy gives it; a
// failure ends it only when no copy is left, and then the last failure is the
// call's. A hedge refused for lack of budget, downstream (504 with pushback -1) or
// before it was sent, leaves the call to the primary. A hedge wins only with a
// success: won is false, and no win is counted, when every copy failed.
func TestFirstAnswerWins(t *testing.T) {
	for _, tc := range []struct {
		name     string
		steps    []step // primary, hedge (sent at 10 ms)
		wantCode int
		wantBody string
		wantTook time.Duration
		wantWin  bool
	}{
		{"a hedge's 500 leaves the call to the primary", []step{{after: 30 * time.Millisecond, code: 200}, {after: time.Millisecond, code: 500}}, 200, "attempt 0", 30 * time.Millisecond, false},
		{"a hedge refused downstream leaves the call to the primary", []step{{after: 30 * time.Millisecond, code: 200}, {after: time.Millisecond, code: 504, pushback: "-1"}}, 200, "attempt 0", 30 * time.Millisecond, false},
		{"a hedge refused before sending leaves the call to the primary", []step{{after: 30 * time.Millisecond, code: 200}, {err: errBudget}}, 200, "attempt 0", 30 * time.Millisecond, false},
		{"a hedge's 404 is an answer", []step{{after: 30 * time.Millisecond, code: 200}, {after: time.Millisecond, code: 404}}, 404, "attempt 1", 11 * time.Millisecond, false},
		{"the primary's 500 waits for the hedge", []step{{after: 20 * time.Millisecond, code: 500}, {after: 20 * time.Millisecond, code: 200}}, 200, "attempt 1", 30 * time.Millisecond, true},
		{"every copy fails: the last failure, no win", []step{{after: 30 * time.Millisecond, code: 500}, {after: 10 * time.Millisecond, code: 502}}, 500, "attempt 0", 30 * time.Millisecond, false},
		{"503 twice: the last, no win", []step{{after: time.Millisecond, code: 503}, {after: time.Millisecond, code: 503}}, 503, "attempt 1", 2 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wins0 := hedgeWins(t)
			synctest.Test(t, func(t *testing.T) {
				ctx, tp := traced(t.Context())
				b := &stepTransport{steps: tc.steps}
				h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}))
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://backend.test/", nil)
				start := time.Now()
				resp, err := h.Transport(b).RoundTrip(req)
				if err != nil {
					t.Fatalf("err %v; want status %d", err, tc.wantCode)
				}
				took := time.Since(start)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				synctest.Wait()
				if resp.StatusCode != tc.wantCode || string(body) != tc.wantBody || took != tc.wantTook {
					t.Errorf("got %d %q after %v; want %d %q after %v", resp.StatusCode, body, took, tc.wantCode, tc.wantBody, tc.wantTook)
				}
				if st := h.Stats(); st.Hedges != 1 || (st.HedgeWins == 1) != tc.wantWin {
					t.Errorf("stats %+v; want 1 hedge, won %v", st, tc.wantWin)
				}
				call := only(t, tp, "GET")
				if call.attr("deadlinekit.hedge.count").AsInt64() != 1 || call.attr("deadlinekit.hedge.won").AsBool() != tc.wantWin {
					t.Errorf("call span %v; want hedge.count 1, won %v", call.attrs, tc.wantWin)
				}
			})
			if got := hedgeWins(t) - wins0; (got == 1) != tc.wantWin || got > 1 {
				t.Errorf("deadlinekit.hedge.wins counted %d; want won %v", got, tc.wantWin)
			}
		})
	}
}

// TestFirstAnswerWinsGRPC: the same rule over gRPC, where a refusal downstream is
// DEADLINE_EXCEEDED with the trailer grpc-retry-pushback-ms: -1 and a refusal before
// sending an error matching deadline.ErrInsufficientBudget.
func TestFirstAnswerWinsGRPC(t *testing.T) {
	for _, tc := range []struct {
		name      string
		steps     []step
		wantCode  codes.Code
		wantReply string // or the error's message
		wantTook  time.Duration
		wantWin   bool
	}{
		{"a hedge's INTERNAL leaves the call to the primary", []step{{after: 30 * time.Millisecond}, {after: time.Millisecond, grpc: codes.Internal}}, codes.OK, "attempt 0", 30 * time.Millisecond, false},
		{"a hedge refused downstream leaves the call to the primary", []step{{after: 30 * time.Millisecond}, {after: time.Millisecond, grpc: codes.DeadlineExceeded, pushback: "-1"}}, codes.OK, "attempt 0", 30 * time.Millisecond, false},
		{"a hedge refused before sending leaves the call to the primary", []step{{after: 30 * time.Millisecond}, {err: errBudget}}, codes.OK, "attempt 0", 30 * time.Millisecond, false},
		{"a hedge's NOT_FOUND is an answer", []step{{after: 30 * time.Millisecond}, {after: time.Millisecond, grpc: codes.NotFound}}, codes.NotFound, "attempt 1", 11 * time.Millisecond, false},
		{"the primary's INTERNAL waits for the hedge", []step{{after: 20 * time.Millisecond, grpc: codes.Internal}, {after: 20 * time.Millisecond}}, codes.OK, "attempt 1", 30 * time.Millisecond, true},
		{"every copy fails: the last failure, no win", []step{{after: 30 * time.Millisecond, grpc: codes.Internal}, {after: 10 * time.Millisecond, grpc: codes.Internal}}, codes.Internal, "attempt 0", 30 * time.Millisecond, false},
		{"UNAVAILABLE twice: the last, no win", []step{{after: time.Millisecond, grpc: codes.Unavailable}, {after: time.Millisecond, grpc: codes.Unavailable}}, codes.Unavailable, "attempt 1", 2 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, tp := traced(t.Context())
				f := &stepInvoker{steps: tc.steps}
				h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}), hedge.WithIdempotentMethods(methodPost))
				reply := &wrapperspb.StringValue{}
				start := time.Now()
				err := h.UnaryClientInterceptor()(ctx, methodPost, &wrapperspb.StringValue{}, reply, nil, f.invoke)
				took := time.Since(start)
				synctest.Wait()
				got := reply.Value
				if err != nil {
					got = status.Convert(err).Message()
				}
				if status.Code(err) != tc.wantCode || got != tc.wantReply || took != tc.wantTook {
					t.Errorf("got %v %q after %v; want %v %q after %v", status.Code(err), got, took, tc.wantCode, tc.wantReply, tc.wantTook)
				}
				if st := h.Stats(); st.Hedges != 1 || (st.HedgeWins == 1) != tc.wantWin {
					t.Errorf("stats %+v; want 1 hedge, won %v", st, tc.wantWin)
				}
				call := only(t, tp, "Sent.deadlinekit.hedgetest.Store.Post")
				if call.attr("deadlinekit.hedge.count").AsInt64() != 1 || call.attr("deadlinekit.hedge.won").AsBool() != tc.wantWin {
					t.Errorf("call span %v; want hedge.count 1, won %v", call.attrs, tc.wantWin)
				}
			})
		})
	}
}

// TestRefusedStopsHedging: a hedge refused for lack of budget triggers no further
// hedge (the next would have even less time); a hedge that failed otherwise does not
// stop the next one, sent one delay later.
func TestRefusedStopsHedging(t *testing.T) {
	for _, tc := range []struct {
		name     string
		first    step // the first hedge, sent at 10 ms
		wantBody string
		wantTook time.Duration
		wantSent int64
	}{
		{"refused downstream", step{after: time.Millisecond, code: 504, pushback: "-1"}, "attempt 0", 50 * time.Millisecond, 2},
		{"refused before sending", step{err: errBudget}, "attempt 0", 50 * time.Millisecond, 2},
		{"failed", step{after: time.Millisecond, code: 500}, "attempt 2", 21 * time.Millisecond, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &stepTransport{steps: []step{{after: 50 * time.Millisecond, code: 200}, tc.first, {after: time.Millisecond, code: 200}}}
				h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}), hedge.WithMaxAttempts(3))
				start := time.Now()
				got := get(t.Context(), h.Transport(b))
				took := time.Since(start)
				synctest.Wait()
				if got != tc.wantBody || took != tc.wantTook || b.n.Load() != tc.wantSent {
					t.Errorf("got %q after %v, %d sent; want %q after %v, %d sent", got, took, b.n.Load(), tc.wantBody, tc.wantTook, tc.wantSent)
				}
			})
		})
	}
}

// TestGetBodyFailsLeavesPrimary: a hedge whose body cannot be replayed is never
// sent: the primary's answer stands (here a 503, which fires the hedge at once), no
// hedge or win is counted, its token goes back to the account, and the trace says
// why the call was not hedged.
func TestGetBodyFailsLeavesPrimary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, tp := traced(t.Context())
		b := &stepTransport{steps: []step{{after: time.Millisecond, code: 503}, {code: 200}}}
		h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}))
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://backend.test/", strings.NewReader("x"))
		req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("gone") }
		resp, err := h.Transport(b).RoundTrip(req)
		if err != nil {
			t.Fatalf("err %v; want the primary's 503", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		synctest.Wait()
		if resp.StatusCode != 503 || string(body) != "attempt 0" || b.n.Load() != 1 {
			t.Errorf("got %d %q, %d sent; want the primary's 503, 1 sent", resp.StatusCode, body, b.n.Load())
		}
		if st := h.Stats(); st.Hedges != 0 || st.HedgeWins != 0 || st.Tokens != hedge.Burst {
			t.Errorf("stats %+v; want no hedge, no win, a full account", st)
		}
		if n := len(tp.named("attempt hedge")); n != 0 {
			t.Errorf("%d hedge attempt spans for a hedge never sent", n)
		}
		call := only(t, tp, "PUT")
		if call.attr("deadlinekit.hedge.skip").AsString() != "not_idempotent" || call.attr("deadlinekit.hedge.count").Type() != 0 {
			t.Errorf("call span %v; want hedge.skip not_idempotent and no hedge.count", call.attrs)
		}
	})
}

// TestSkipRecorded: every call through the layer says on its call span what the
// layer did: the hedges it sent, or why it sent none.
func TestSkipRecorded(t *testing.T) {
	slow := func(a, _ int) time.Duration { return time.Second / time.Duration(1+999*a) }
	for _, tc := range []struct {
		name     string
		opts     []hedge.Option
		method   string
		noGet    bool
		budget   time.Duration
		warm     int // calls made before, untraced
		latency  func(a, arrival int) time.Duration
		wantSkip string
	}{
		{"not idempotent", []hedge.Option{hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond})}, http.MethodPost, false, 0, 0, slow, "not_idempotent"},
		{"body not replayable", []hedge.Option{hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond})}, http.MethodPut, true, 0, 0, slow, "not_idempotent"},
		{"warming up", nil, http.MethodGet, false, 0, 0, slow, "warming_up"},
		{"one attempt", []hedge.Option{hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}), hedge.WithMaxAttempts(1)}, http.MethodGet, false, 0, 0, slow, "disabled"},
		{"no extra load", []hedge.Option{hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}), hedge.WithMaxExtraLoad(0)}, http.MethodGet, false, 0, 0, slow, "disabled"},
		{"cap", []hedge.Option{hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}), hedge.WithMaxExtraLoad(0.01)}, http.MethodGet, false, 0, hedge.Burst, slow, "cap"},
		{"deadline", []hedge.Option{hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond})}, http.MethodGet, false, 25 * time.Millisecond, 0, slow, "deadline"},
		{"not due", []hedge.Option{hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond})}, http.MethodGet, false, 0, 0, func(int, int) time.Duration { return time.Millisecond }, "not_due"},
		{"hedged", []hedge.Option{hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond})}, http.MethodGet, false, 0, 0, slow, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rt := hedge.New(tc.opts...).Transport(&latencyBackend{latency: tc.latency})
				for range tc.warm {
					get(t.Context(), rt)
				}
				ctx, tp := traced(t.Context())
				if tc.budget > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.budget)
					defer cancel()
				}
				req, _ := http.NewRequestWithContext(ctx, tc.method, "http://backend.test/", strings.NewReader("x"))
				if tc.noGet {
					req.GetBody = nil
				}
				if resp, err := rt.RoundTrip(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				synctest.Wait()
				call := only(t, tp, tc.method)
				skip, count := call.attr("deadlinekit.hedge.skip").AsString(), call.attr("deadlinekit.hedge.count").AsInt64()
				if skip != tc.wantSkip || (count == 1) != (tc.wantSkip == "") {
					t.Errorf("hedge.skip %q, hedge.count %d; want skip %q", skip, count, tc.wantSkip)
				}
			})
		})
	}
}

// TestSkipRecordedGRPC: the same over gRPC.
func TestSkipRecordedGRPC(t *testing.T) {
	registerStore(t)
	slow := func(a int) (time.Duration, error) { return time.Second / time.Duration(1+999*a), nil }
	for _, tc := range []struct {
		name     string
		opts     []hedge.Option
		method   string
		latency  func(int) (time.Duration, error)
		wantSkip string
	}{
		{"not idempotent", []hedge.Option{hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond})}, methodPost, slow, "not_idempotent"},
		{"warming up", nil, methodGet, slow, "warming_up"},
		{"one attempt", []hedge.Option{hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}), hedge.WithMaxAttempts(1)}, methodGet, slow, "disabled"},
		{"not due", []hedge.Option{hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond})}, methodGet, func(int) (time.Duration, error) { return time.Millisecond, nil }, "not_due"},
		{"hedged", []hedge.Option{hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond})}, methodGet, slow, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, tp := traced(t.Context())
				f := &fakeInvoker{latency: tc.latency}
				if err := hedge.UnaryClientInterceptor(tc.opts...)(ctx, tc.method, &wrapperspb.StringValue{}, &wrapperspb.StringValue{}, nil, f.invoke); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				call := only(t, tp, "Sent.deadlinekit.hedgetest.Store."+tc.method[strings.LastIndexByte(tc.method, '/')+1:])
				skip, count := call.attr("deadlinekit.hedge.skip").AsString(), call.attr("deadlinekit.hedge.count").AsInt64()
				if skip != tc.wantSkip || (count == 1) != (tc.wantSkip == "") {
					t.Errorf("hedge.skip %q, hedge.count %d; want skip %q", skip, count, tc.wantSkip)
				}
			})
		})
	}
}

// TestLoserSpanEndsWithCall: when the call is decided, the span of a copy still in
// flight ends at once, cancelled, before the call's span; it is not ended again when
// that copy returns, long after.
func TestLoserSpanEndsWithCall(t *testing.T) {
	// The hedge, sent at 10 ms, ignores its cancellation and returns at 1 s; the
	// primary answers at 12 ms.
	stubborn := func(a int) time.Duration {
		if a == 0 {
			return 12 * time.Millisecond
		}
		return time.Second
	}
	check := func(t *testing.T, tp *fakeProvider, callName string) {
		t.Helper()
		// The loser returns at 1 s: let it, whatever is found now.
		defer func() {
			time.Sleep(2 * time.Second)
			synctest.Wait()
			for _, s := range tp.named("attempt hedge") {
				if ends, _ := s.endState(); ends != 1 {
					t.Errorf("loser's span ended %d times once it returned; want 1", ends)
				}
			}
		}()
		losers := tp.named("attempt hedge")
		if len(losers) != 1 {
			t.Errorf("%d hedge spans; want 1", len(losers))
			return
		}
		loser := losers[0]
		ends, at := loser.endState()
		if ends != 1 || loser.attr("deadlinekit.attempt.outcome").AsString() != "canceled" {
			t.Errorf("when the call returned, the loser's span had ended %d times (outcome %q); want once, cancelled",
				ends, loser.attr("deadlinekit.attempt.outcome").AsString())
		}
		call := only(t, tp, callName)
		if callEnds, callAt := call.endState(); callEnds != 1 || at.After(callAt) {
			t.Errorf("loser's span ended at %v, the call's %d times at %v; want the loser first", at, callEnds, callAt)
		}
	}
	t.Run("http", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, tp := traced(t.Context())
			rt := hedge.NewTransport(testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
				time.Sleep(stubborn(attemptOf(r)))
				return response(r, 200, nil), nil
			}), hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}))
			if got := get(ctx, rt); got != "attempt 0" {
				t.Fatalf("answer %q", got)
			}
			check(t, tp, "GET")
		})
	})
	t.Run("grpc", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, tp := traced(t.Context())
			invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
				a := len(metadata.ValueFromOutgoingContext(ctx, "grpc-previous-rpc-attempts"))
				time.Sleep(stubborn(a))
				return nil
			}
			ic := hedge.UnaryClientInterceptor(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}), hedge.WithIdempotentMethods(methodPost))
			if err := ic(ctx, methodPost, &wrapperspb.StringValue{}, &wrapperspb.StringValue{}, nil, invoker); err != nil {
				t.Fatal(err)
			}
			check(t, tp, "Sent.deadlinekit.hedgetest.Store.Post")
		})
	})
}
