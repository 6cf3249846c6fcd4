package deadlinekit_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/attempts"
	"github.com/deadlinekit/deadlinekit/internal/idempotency"
	"github.com/deadlinekit/deadlinekit/internal/quantile"
	"github.com/deadlinekit/deadlinekit/otelattr"
)

// BenchmarkStackFloor measures what the call of [BenchmarkStack] costs with the least
// work deadlinekit's promises demand of a call answered at its first attempt, done
// by hand in one client and one server interceptor (floorClient, floorServer): no
// options, no observers, no classification, no separate layers. It is a reference,
// not a product: it says how close to the bare call any implementation of the
// stack can come on the machine it runs on, and so what [BenchmarkStack]'s figures
// should be judged against. What it leaves out (the trailer retry must ask for to
// read pushback, the idempotency lookup, the hedge cap's token) only makes it
// cheaper: a figure above a goal here is above it for any implementation.
//
// "fused" runs the two interceptors untraced, then traced with the call's and the
// server's attributes only (no trace of the attempt itself), with a span event per
// attempt, and with an attempt span per attempt (what the toolkit does).
// "fused-wire" adds what the promises put on the wire and the floor leaves out: the
// chain rule's mark on the call's metadata (hedge) and the trailer asked for
// (retry's pushback), each done the cheapest way (one allocation for the trailer and
// the options).
// "fused-all" adds the rest of what the client and server stacks of [BenchmarkStack]
// promise and the floor leaves out, each done the cheapest way: on the client, the
// method's idempotency (a declared set), the call's idempotency-key (one lookup of
// the outgoing metadata: a keyed call is judged and recorded apart), the request
// being served (one context lookup for the chain rule, the one-layer rule and the
// level to pass on), a latency window per method (a lookup), the hedge cap's token
// account (an atomic add), and, traced, the call span DESIGN has the stack own, the
// attempt span's parent, with the call's attributes on it rather than on the
// caller's span; on the server, the level, the chain rule's mark and the
// idempotency-key (a dedup replay beneath the guard is no handler work) read from
// the metadata, and put with the inbound budget on the handler's context (one
// allocation) for its own calls and for propagate.InboundFromContext. The floor's
// doc above still holds of it: what it leaves out only makes it cheaper.
// "passthrough" runs five interceptors that only call the next, three on the client
// and two on the server, as the real stack has: the price of composing layers.
//
//	go test -run '^$' -bench StackFloor -benchtime 20000x -count 5 .
func BenchmarkStackFloor(b *testing.B) {
	for _, v := range []struct {
		name   string
		traced bool
		rec    floorRecord
	}{
		{"fused/untraced", false, recordNone},
		{"fused/traced-no-attempt", true, recordNone},
		{"fused/traced-event", true, recordEvent},
		{"fused/traced-span", true, recordSpan},
		{"fused-wire/untraced", false, recordNone},
		{"fused-wire/traced-span", true, recordSpan},
		{"fused-all/untraced", false, recordNone},
		{"fused-all/traced-span", true, recordSpan},
	} {
		b.Run(v.name, func(b *testing.B) {
			c := newFloorClient(v.rec)
			c.wire = strings.HasPrefix(v.name, "fused-wire/")
			server := floorServer
			if strings.HasPrefix(v.name, "fused-all/") {
				c.all, c.wire, server = true, true, floorServerAll
			}
			pairCall(b, []grpc.UnaryClientInterceptor{c.intercept}, []grpc.UnaryServerInterceptor{server}, v.traced, 0)
		})
	}
	b.Run("passthrough", func(b *testing.B) {
		pairedTraced(b, func() ([]grpc.UnaryClientInterceptor, []grpc.UnaryServerInterceptor) {
			return []grpc.UnaryClientInterceptor{passClient, passClient, passClient}, []grpc.UnaryServerInterceptor{passServer, passServer}
		}, 0)
	})
}

func passClient(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(ctx, method, req, reply, cc, opts...)
}

func passServer(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return handler(ctx, req)
}

// floorRecord is how the floor client makes an attempt visible in a trace.
type floorRecord uint8

const (
	recordNone  floorRecord = iota // only the call span's attributes
	recordEvent                    // a span event on the call span
	recordSpan                     // an attempt span, parent of the downstream's span
)

// floorClient does, for one method, what the client stack must do on a call whose
// first attempt succeeds: read the budget (propagate), arm a hedge (a latency window,
// a cancelable context for the primary so that a winning hedge can stop it, and a
// wake-up: one shared timer, armed when none is, the cheapest there is), feed the
// window and the retry budget when the call succeeds (hedge, retry), and record the
// call's attributes (otelattr). Its timer's callback sends nothing.
type floorClient struct {
	rec      floorRecord
	wire     bool // the mark and the trailer, as "fused-wire"
	all      bool // every promise, as "fused-all"
	w        *quantile.Window
	armed    atomic.Bool
	deposits atomic.Int64
	// "fused-all": the methods declared idempotent, a window per method, the hedge
	// cap's token account.
	idempotent map[string]bool
	windows    map[string]*quantile.Window
	tokens     atomic.Int64
	// "fused-all" on HTTP: a window and a circuit per host.
	hosts, circuits sync.Map
}

func newFloorClient(rec floorRecord) *floorClient {
	w := quantile.New(quantile.Config{Quantile: 0.99})
	return &floorClient{rec: rec, w: w, idempotent: map[string]bool{stackMethod: true}, windows: map[string]*quantile.Window{stackMethod: w}}
}

// newFloorAllClient is the client of "fused-all": every promise, the wire's included.
func newFloorAllClient(rec floorRecord) *floorClient {
	c := newFloorClient(rec)
	c.wire, c.all = true, true
	return c
}

// floorInbound is what the "fused-all" server puts on the handler's context, in one
// allocation: the inbound budget, the caller's level and the chain rule's mark.
type floorInbound struct {
	context.Context
	budget  time.Duration
	level   string
	covered bool
	keyed   bool // a dedup replay beneath is no handler work: the guard must know
}

type floorInboundKey struct{}

func (c *floorInbound) Value(key any) any {
	if _, ok := key.(floorInboundKey); ok {
		return c
	}
	return c.Context.Value(key)
}

// floorDelay is the hedge delay the real stack runs with in BenchmarkStack (hedge's
// minimum delay: the call's P99 is below it).
const floorDelay = time.Millisecond

func (c *floorClient) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	start := time.Now()
	dl, has := ctx.Deadline()
	left := dl.Sub(start)
	if has && left <= 0 {
		return status.Error(codes.DeadlineExceeded, "no time left")
	}
	w, hedged := c.w, true
	if c.all {
		// What the stack reads of the call and of the request being served.
		w = c.windows[method]
		key := metadata.ValueFromOutgoingContext(ctx, idempotency.Key)
		keyed := len(key) > 0 && key[0] != ""
		in, _ := ctx.Value(floorInboundKey{}).(*floorInbound)
		hedged = (c.idempotent[method] || keyed) && (in == nil || !in.covered)
		if in != nil && in.level != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, criticality.MetadataKey, in.level)
		}
		c.tokens.Add(1)
	}
	if hedged {
		_, _ = w.Tracked(start) // the hedge delay
	}
	if c.wire {
		ctx = attempts.WithMark(ctx)
		w := &floorWire{}
		opts = append(append(w.opts[:0], opts...), grpc.Trailer(&w.trailer))
	}
	span := trace.SpanFromContext(ctx)
	recording := span.IsRecording()
	if recording && c.all {
		// The call span the stack owns: the call's attributes go on it.
		ctx, span = span.TracerProvider().Tracer(otelattr.ScopeName).Start(ctx, method, trace.WithSpanKind(trace.SpanKindClient))
		defer span.End()
	}
	actx, cancel := context.WithCancel(ctx)
	if c.armed.CompareAndSwap(false, true) {
		time.AfterFunc(floorDelay, func() { c.armed.Store(false) })
	}
	var attempt trace.Span
	if recording && c.rec == recordSpan {
		actx, attempt = span.TracerProvider().Tracer(otelattr.ScopeName).Start(actx, "attempt primary", trace.WithAttributes(
			otelattr.AttemptNumberKey.Int(1), otelattr.AttemptKindKey.String("primary"), attribute.Key("previous-rpc-attempts").Int(0)))
		attempt.SetAttributes(otelattr.BudgetSentKey.Float64(float64(left) / 1e6))
	}
	err := invoker(actx, method, req, reply, cc, opts...)
	end := time.Now()
	cancel()
	if err == nil {
		w.Add(end, end.Sub(start))
		c.deposits.Add(1)
	}
	if !recording {
		return err
	}
	switch c.rec {
	case recordSpan:
		attempt.SetAttributes(otelattr.AttemptOutcomeKey.String("success"))
		attempt.End()
	case recordEvent:
		span.AddEvent("attempt", trace.WithAttributes(otelattr.AttemptNumberKey.Int(1), otelattr.AttemptKindKey.String("primary"),
			attribute.Key("previous-rpc-attempts").Int(0), otelattr.AttemptOutcomeKey.String("success")))
	}
	if c.rec != recordSpan {
		span.SetAttributes(otelattr.BudgetSentKey.Float64(float64(left) / 1e6))
	}
	span.SetAttributes(otelattr.AttemptsKey.Int(1), otelattr.RetryCountKey.Int(0), otelattr.RetryStopReasonKey.String("success"),
		otelattr.HedgeCountKey.Int(0), otelattr.HedgeWonKey.Bool(false))
	return err
}

// floorServerAll is [floorServer] with what "fused-all" adds on the server: the
// caller's level, the chain rule's mark and the idempotency-key read from the
// metadata, and, with the budget, put on the handler's context.
func floorServerAll(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	left, _ := deadline.Remaining(ctx)
	in := &floorInbound{Context: ctx, budget: left, level: attempts.FirstIncoming(ctx, criticality.MetadataKey),
		keyed: attempts.FirstIncoming(ctx, idempotency.Key) != ""}
	if mark := attempts.FirstIncoming(ctx, attempts.CoveredKey); mark != "" {
		in.covered = attempts.Covers(mark, "")
	} else {
		in.covered = attempts.Covers("", attempts.FirstIncoming(ctx, attempts.Key))
	}
	return floorServer(in, req, info, handler)
}

// floorWire is the trailer a "fused-wire" call asks for and its call options, in one
// allocation.
type floorWire struct {
	trailer metadata.MD
	opts    [4]grpc.CallOption
}

// floorServer does what the server stack must do on a request that is admitted and
// answered in time: read the budget, check it against the floor (propagate,
// shortcircuit), record the budget and the overrun. As in the real stack, the
// guard's attributes are recorded on refusals only.
func floorServer(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	const floor = time.Millisecond
	dl, has := ctx.Deadline()
	left := time.Until(dl)
	span := trace.SpanFromContext(ctx)
	if has && left < floor {
		if span.IsRecording() {
			span.SetAttributes(otelattr.ShortCircuitRejectedKey.Bool(true), otelattr.ShortCircuitFloorKey.Float64(1), otelattr.ShortCircuitRemainingKey.Float64(float64(left)/1e6))
		}
		return nil, status.Error(codes.DeadlineExceeded, "below the floor")
	}
	if span.IsRecording() {
		ms := float64(left) / 1e6
		span.SetAttributes(otelattr.BudgetReceivedKey.Float64(ms), otelattr.BudgetSourceKey.String("grpc-timeout"), otelattr.BudgetClampedKey.Bool(false))
	}
	resp, err := handler(ctx, req)
	var overrun time.Duration
	if ctx.Err() != nil {
		overrun = max(time.Since(dl), 0)
	}
	if span.IsRecording() {
		span.SetAttributes(otelattr.ServerOverrunKey.Float64(float64(overrun) / 1e6))
	}
	return resp, err
}
