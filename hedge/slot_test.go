package hedge_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit/hedge"
)

// TestSlotAndFullCallAgree: a hedgeable gRPC call that starts in a slot (the fast
// path of a call whose hedge is never sent) behaves as one that starts as a full
// call, over seeded random histories of calls whose copies answer, fail, fail in a
// way that sends the next hedge at once, stall past one or two hedge delays, or
// outlive the caller's deadline: the same errors, replies and headers, the same
// copies sent and cut, the same statistics and observer events, and the same spans
// with the same attributes.
func TestSlotAndFullCallAgree(t *testing.T) {
	registerStore(t)
	for seed := range uint64(25) {
		synctest.Test(t, func(t *testing.T) {
			slot, full := slotHistory(t, seed, false), slotHistory(t, seed, true)
			if len(slot) != len(full) {
				t.Fatalf("seed %d: %d lines in a slot, %d full", seed, len(slot), len(full))
			}
			for i := range slot {
				if slot[i] != full[i] {
					t.Fatalf("seed %d, line %d:\nslot: %s\nfull: %s", seed, i, slot[i], full[i])
				}
			}
		})
	}
}

// slotHistory runs the calls of seed through a Hedger, starting them full or not,
// and returns what a caller, the downstream and a trace see of them, line by line.
func slotHistory(t *testing.T, seed uint64, full bool) []string {
	rng := rand.New(rand.NewPCG(seed, 1))
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	var mu sync.Mutex
	var events []string
	// The delay is learned (the window's P99 of the successes, between 5 and 20 ms)
	// after ten calls.
	opts := []hedge.Option{
		hedge.WithIdempotentMethods(methodGet),
		hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond, Min: 5 * time.Millisecond, Max: 20 * time.Millisecond, MinSamples: 10}),
		hedge.WithNonFatalGRPC(codes.ResourceExhausted),
		hedge.WithMaxAttempts(1 + rng.IntN(3)),
		hedge.WithObserver(func(ctx context.Context, e hedge.Event) {
			mu.Lock()
			defer mu.Unlock()
			line := fmt.Sprintf("%+v", e)
			if ctx.Err() != nil {
				// The caller's deadline passed or it left: every copy still out was
				// cut at that instant, and whether the call ended with one of their
				// failures (Winner ≥ 0) or without (-1) is a race, in both paths.
				line = fmt.Sprintf("Target:%s Attempts:%d Delay:%v Skipped:%s, the caller gone", e.Target, e.Attempts, e.Delay, e.Skipped)
			}
			events = append(events, line)
		}),
	}
	if full {
		opts = append(opts, hedge.WithoutFastPath())
	}
	h := hedge.New(opts...)
	ic := h.UnaryClientInterceptor()
	outcomes := []codes.Code{codes.OK, codes.OK, codes.OK, codes.Unavailable, codes.NotFound, codes.ResourceExhausted}
	var out []string
	seenSpans := 0
	for i := range 60 {
		var lat [hedge.MaxAttempts]time.Duration
		var code [hedge.MaxAttempts]codes.Code
		for a := range lat {
			// Each copy's sub-millisecond part its own, and none the caller's
			// budget's or cancel's: no two events fall at the same instant, so the
			// history is the same in both runs.
			lat[a] = time.Duration(rng.IntN(30))*time.Millisecond + time.Duration(137+211*a)*time.Microsecond
			code[a] = outcomes[rng.IntN(len(outcomes))]
		}
		f := &fakeInvoker{latency: func(a int) (time.Duration, error) {
			if code[a] != codes.OK {
				return lat[a], status.Error(code[a], "copy "+fmt.Sprint(a))
			}
			return lat[a], nil
		}}
		budget := time.Minute
		if rng.IntN(4) == 0 {
			budget = time.Duration(rng.IntN(40))*time.Millisecond + 337*time.Microsecond
		}
		ctx, span := tp.Tracer("test").Start(context.Background(), "caller")
		ctx, cancel := context.WithTimeout(ctx, budget)
		if rng.IntN(6) == 0 { // the caller leaves
			leave := time.AfterFunc(time.Duration(rng.IntN(40))*time.Millisecond+773*time.Microsecond, cancel)
			defer leave.Stop()
		}
		reply := &wrapperspb.StringValue{}
		var header metadata.MD
		start := time.Now()
		err := ic(ctx, methodGet, &wrapperspb.StringValue{}, reply, nil, f.invoke, grpc.Header(&header))
		took := time.Since(start)
		cancel()
		span.End()
		synctest.Wait() // the losers have returned
		out = append(out, fmt.Sprintf("call %d (budget %v, %v %v): after %v %v %q header %v; sent %d, cut %d, seen %q",
			i, budget, lat, code, took, status.Convert(err).Proto(), reply.Value, header, f.calls.Load(), f.cut.Load(), f.seen))
		ended := sr.Ended()
		var spans []string
		for _, s := range ended[seenSpans:] {
			attrs := make([]string, 0, len(s.Attributes()))
			for _, a := range s.Attributes() {
				attrs = append(attrs, string(a.Key)+"="+a.Value.String())
			}
			sort.Strings(attrs)
			parent := "root"
			for _, p := range ended {
				if p.SpanContext().SpanID() == s.Parent().SpanID() {
					parent = p.Name()
				}
			}
			spans = append(spans, fmt.Sprintf("  span %q under %q, %v %q: %s; events %d, ended %v after the call",
				s.Name(), parent, s.Status().Code, s.Status().Description, strings.Join(attrs, " "), len(s.Events()), s.EndTime().Sub(start)))
		}
		seenSpans = len(ended)
		slices.Sort(spans)
		out = append(out, spans...)
	}
	out = append(out, fmt.Sprintf("stats %+v, delays %v", h.Stats(), h.Delays()))
	mu.Lock()
	defer mu.Unlock()
	return append(out, events...)
}
