package record

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/otelattr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// instruments are made once, from the global MeterProvider. Until an SDK is
// installed they are the API's delegating no-ops; installing one later (SetMeterProvider)
// switches them over.
type instrumentSet struct {
	retries        metric.Int64Counter
	budgetRefusals metric.Int64Counter
	hedgesSent     metric.Int64Counter
	hedgeWins      metric.Int64Counter
	rejections     metric.Int64Counter
	serverBudget   metric.Float64Histogram
	overrun        metric.Float64Histogram

	breakerState       metric.Int64Gauge
	breakerTransitions metric.Int64Counter
	breakerRefused     metric.Int64Counter
	breakerOutcomes    metric.Int64Counter
	breakerThrottled   metric.Int64Counter

	inFlight    metric.Int64UpDownCounter
	queueLength metric.Int64UpDownCounter
	limit       metric.Int64Gauge
	queueWait   metric.Float64Histogram
}

var instruments = sync.OnceValue(func() *instrumentSet { return newInstruments(otel.GetMeterProvider()) })

func newInstruments(mp metric.MeterProvider) *instrumentSet {
	m := mp.Meter(otelattr.ScopeName)
	s := &instrumentSet{}
	s.retries = counter(m, "deadlinekit.retry.retries")
	s.budgetRefusals = counter(m, "deadlinekit.retry.budget_refusals")
	s.hedgesSent = counter(m, "deadlinekit.hedge.sent")
	s.hedgeWins = counter(m, "deadlinekit.hedge.wins")
	s.rejections = counter(m, "deadlinekit.shortcircuit.rejections")
	s.serverBudget = histogram(m, "deadlinekit.server.budget")
	s.overrun = histogram(m, "deadlinekit.server.overrun")
	s.breakerState = gauge(m, "deadlinekit.breaker.state")
	s.breakerTransitions = counter(m, "deadlinekit.breaker.transitions")
	s.breakerRefused = counter(m, "deadlinekit.breaker.refused")
	s.breakerOutcomes = counter(m, "deadlinekit.breaker.outcomes")
	s.breakerThrottled = counter(m, "deadlinekit.breaker.throttled")
	s.inFlight = upDown(m, "deadlinekit.shortcircuit.in_flight")
	s.queueLength = upDown(m, "deadlinekit.shortcircuit.queue_length")
	s.limit = gauge(m, "deadlinekit.shortcircuit.limit")
	s.queueWait = histogram(m, "deadlinekit.shortcircuit.queue_wait")
	return s
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Inbound records, on the server span in ctx, the budget the server applied to
// a request, where it came from and whether the clamp cut it; and the budget in the
// deadlinekit.server.budget histogram.
func Inbound(ctx context.Context, budget time.Duration, source string, clamped bool) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(
			otelattr.BudgetReceivedKey.Float64(millis(budget)),
			otelattr.BudgetSourceKey.String(source),
			otelattr.BudgetClampedKey.Bool(clamped),
		)
	}
	instruments().serverBudget.Record(ctx, budget.Seconds())
}

// Criticality records, on the server span in ctx, the request's level in its wire
// form, as read from its caller or set by the server.
func Criticality(ctx context.Context, l criticality.Level) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(otelattr.CriticalityKey.String(l.String()))
	}
}

// Guard records the short-circuit guard's refusal on the server span in ctx:
// the floor, the budget left, and that the request was refused; it counts in
// deadlinekit.shortcircuit.rejections, by reason and by the request's level.
func Guard(ctx context.Context, remaining, floor time.Duration) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(
			otelattr.ShortCircuitRejectedKey.Bool(true),
			otelattr.ShortCircuitFloorKey.Float64(millis(floor)),
			otelattr.ShortCircuitRemainingKey.Float64(millis(remaining)),
		)
		span.SetStatus(codes.Error, "refused before the handler ran: budget below the floor")
	}
	instruments().rejections.Add(ctx, 1, reasonOption(reason(remaining), criticality.From(ctx))...)
}

// reason is the refusal reason of a floor's refusal, as package shortcircuit names it.
func reason(remaining time.Duration) string {
	if remaining <= 0 {
		return "expired"
	}
	return "below_floor"
}

// Overrun records how long a handler kept running after its deadline (zero
// when it finished in time) on the server span in ctx, and in the
// deadlinekit.server.overrun histogram.
func Overrun(ctx context.Context, overrun time.Duration) {
	overrun = max(overrun, 0)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(otelattr.ServerOverrunKey.Float64(millis(overrun)))
	}
	instruments().overrun.Record(ctx, overrun.Seconds())
}

// BudgetSent records the budget written into an outbound request: on the
// attempt's span when ctx's span is one, and on the call's span ([StartCall]) for the
// call's first attempt. It never writes on any other span (a server span).
func BudgetSent(ctx context.Context, budget time.Duration) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if isAttempt(ctx, span) {
		span.SetAttributes(otelattr.BudgetSentKey.Float64(millis(budget)))
	}
	if c := callFrom(ctx); c != nil {
		c.recordBudget(millis(budget))
	}
}

// RetryCall records what the retry layer did with a finished call: its
// attempts and the reason it stopped, written on the call's span ([StartCall]) when
// the call ends. StopBudgetEmpty also counts in deadlinekit.retry.budget_refusals.
func RetryCall(ctx context.Context, attempts int, stop StopReason) {
	if c := callFrom(ctx); c != nil {
		c.recordRetry(attempts, stop)
	}
	if stop == StopBudgetEmpty {
		instruments().budgetRefusals.Add(ctx, 1)
	}
}

// HedgeCall records what the hedging layer did with one call: the hedges it
// sent, whether one of them gave the answer, and, when it sent none, why not (skip).
// They are written on the call's span ([StartCall]) when the call ends: hedge.count
// and hedge.won when a hedge was sent, else hedge.skip. Under the retry layer, the
// hedges of every attempt add up. A winning hedge also counts in
// deadlinekit.hedge.wins.
func HedgeCall(ctx context.Context, hedges int, won bool, skip HedgeSkip) {
	if c := callFrom(ctx); c != nil {
		c.recordHedge(hedges, won, skip)
	}
	if won {
		instruments().hedgeWins.Add(ctx, 1)
	}
}

// Attempt is the span of one attempt of a call. Its zero value (returned when the
// call's span is not recording) does nothing.
type Attempt struct {
	st *attemptState
	// joined: a primary sent inside an attempt of the layer above (hedge under
	// retry). It has no span of its own; its End tells that attempt how the copy it
	// carried ended when that copy was not the call's answer (see [Attempt.End]).
	joined bool
}

// attemptState is an attempt's span, shared with a layer beneath that sends its
// primary inside it.
type attemptState struct {
	span trace.Span

	mu      sync.Mutex
	lost    Outcome // how the copy sent inside it ended, when it lost: failure or canceled
	lostErr error
}

// StartAttempt starts the span of attempt n (1-based) of the call whose span is in
// ctx, and returns a context carrying it: send the attempt with that context so that
// the downstream's span is its child. A retry counts in deadlinekit.retry.retries and
// a hedge in deadlinekit.hedge.sent, whether or not the call is traced.
func StartAttempt(ctx context.Context, p Protocol, kind AttemptKind, n int) (context.Context, Attempt) {
	switch kind {
	case KindRetry:
		instruments().retries.Add(ctx, 1)
	case KindHedge:
		instruments().hedgesSent.Add(ctx, 1)
	}
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, Attempt{}
	}
	if kind == KindPrimary {
		if st := attemptOf(ctx, parent); st != nil {
			return ctx, Attempt{st: st, joined: true}
		}
	}
	if c := callFrom(ctx); c != nil {
		// Every attempt of the call, whichever layer makes it, is a child of the
		// call's span and has a number of its own.
		n = c.nextAttempt()
		if parent != c.span {
			ctx = trace.ContextWithSpan(ctx, c.span)
			parent = c.span
		}
	}
	// The SDK's default span kind is internal, which an attempt span is.
	ctx, span := parent.TracerProvider().Tracer(otelattr.ScopeName).Start(ctx, attemptSpanName(kind), attemptStart(p, kind, n)...)
	ac := &attemptContext{Context: ctx, st: attemptState{span: span}}
	return ac, Attempt{st: &ac.st}
}

// attemptStart returns the start options of the span of attempt n of kind, sent
// over p: its number, its kind, and the count of the attempts before it in p's
// convention. Those of the first attempts of each kind are made once
// (attemptStarts): building them per attempt takes three allocations.
func attemptStart(p Protocol, kind AttemptKind, n int) []trace.SpanStartOption {
	if k := kindIndex(kind); k >= 0 && (p == HTTP || p == GRPC) && n >= 1 && n <= maxKeptAttempt {
		return attemptStarts[p-HTTP][k][n-1]
	}
	return buildAttemptStart(p, kind, n)
}

func buildAttemptStart(p Protocol, kind AttemptKind, n int) []trace.SpanStartOption {
	attrs := make([]attribute.KeyValue, 2, 3)
	attrs[0], attrs[1] = otelattr.AttemptNumberKey.Int(n), otelattr.AttemptKindKey.String(string(kind))
	switch p {
	case HTTP:
		attrs = append(attrs, httpResendCountKey.Int(n-1))
	case GRPC:
		attrs = append(attrs, previousRPCAttemptsKey.Int(n-1))
	}
	return []trace.SpanStartOption{trace.WithAttributes(attrs...)}
}

// maxKeptAttempt is the highest attempt number whose span start options are made
// once.
const maxKeptAttempt = 8

var attemptKinds = [...]AttemptKind{KindPrimary, KindRetry, KindHedge}

// kindIndex is kind's index in attemptKinds, or -1.
func kindIndex(kind AttemptKind) int {
	switch kind {
	case KindPrimary:
		return 0
	case KindRetry:
		return 1
	case KindHedge:
		return 2
	}
	return -1
}

// attemptStarts holds attemptStart's options, by protocol (HTTP, GRPC), kind
// (attemptKinds) and attempt number less one. Nothing writes to them: the SDK copies
// a span's start attributes.
var attemptStarts = func() (t [2][len(attemptKinds)][maxKeptAttempt][]trace.SpanStartOption) {
	for pi, p := range []Protocol{HTTP, GRPC} {
		for k, kind := range attemptKinds {
			for i := range maxKeptAttempt {
				t[pi][k][i] = buildAttemptStart(p, kind, i+1)
			}
		}
	}
	return t
}()

// stateContext is a context that carries a state S under the key K{}: its parent's,
// with the state, in one allocation where context.WithValue and the state would take
// two.
type stateContext[K comparable, S any] struct {
	context.Context
	st S
}

func (c *stateContext[K, S]) Value(key any) any {
	var k K
	if key == any(k) {
		return &c.st
	}
	return c.Context.Value(key)
}

// attemptContext is an attempt's context, its state under attemptKey.
type attemptContext = stateContext[attemptKey, attemptState]

// attemptSpanName is "attempt " and the kind, without building the string per call.
func attemptSpanName(kind AttemptKind) string {
	switch kind {
	case KindPrimary:
		return "attempt primary"
	case KindRetry:
		return "attempt retry"
	case KindHedge:
		return "attempt hedge"
	}
	return "attempt " + string(kind)
}

// outcomeAttr is the attempt span's outcome attribute, made once for the known
// outcomes: a slice made per call is an allocation.
func outcomeAttr(o Outcome) []attribute.KeyValue {
	switch o {
	case OutcomeSuccess:
		return outcomeAttrs[0]
	case OutcomeFailure:
		return outcomeAttrs[1]
	case OutcomeCanceled:
		return outcomeAttrs[2]
	}
	return []attribute.KeyValue{otelattr.AttemptOutcomeKey.String(string(o))}
}

var outcomeAttrs = [...][]attribute.KeyValue{
	{otelattr.AttemptOutcomeKey.String(string(OutcomeSuccess))},
	{otelattr.AttemptOutcomeKey.String(string(OutcomeFailure))},
	{otelattr.AttemptOutcomeKey.String(string(OutcomeCanceled))},
}

// attemptKey marks a context whose span is an attempt span, its value the
// *attemptState.
type attemptKey struct{}

// isAttempt reports whether span, the span of ctx, is an attempt span: a layer above
// (retry above hedge) has started an attempt, and a primary below it is that same
// attempt, not one of its own.
func isAttempt(ctx context.Context, span trace.Span) bool { return attemptOf(ctx, span) != nil }

// attemptOf returns the attempt whose span is span, the span of ctx; nil when span is
// not an attempt's.
func attemptOf(ctx context.Context, span trace.Span) *attemptState {
	if st, ok := ctx.Value(attemptKey{}).(*attemptState); ok && st.span == span {
		return st
	}
	return nil
}

// Recording reports whether the attempt has a span of its own (the call's span is
// recording): then the attempt's request needs its own trace header ([InjectHTTP]).
func (a Attempt) Recording() bool { return a.st != nil && !a.joined }

// End ends the attempt's span with its outcome. A failure is an error, whichever
// layer sent the attempt: err, when not nil, is recorded on the span and describes
// its status. A canceled attempt is not an error, whether another attempt answered
// first (err nil) or its caller gave up (err says how, see [CallerCanceled]): its
// span ends with an event saying which.
//
// A joined primary (one sent by the hedging layer inside the retry layer's attempt)
// has no span of its own: when it lost (canceled by a hedge that answered, or failed
// while a hedge answered), its End makes the attempt it was sent in end that way,
// whatever the layer above makes of the call's answer, which is not this copy's.
func (a Attempt) End(outcome Outcome, err error) {
	st := a.st
	if st == nil {
		return
	}
	if a.joined {
		if outcome != OutcomeSuccess {
			st.mu.Lock()
			st.lost, st.lostErr = outcome, err
			st.mu.Unlock()
		}
		return
	}
	st.mu.Lock()
	if st.lost != "" {
		outcome, err = st.lost, st.lostErr
	}
	st.mu.Unlock()
	span := st.span
	span.SetAttributes(outcomeAttr(outcome)...)
	switch outcome {
	case OutcomeFailure:
		desc := "failed"
		if err != nil {
			span.RecordError(err)
			desc = err.Error()
		}
		span.SetStatus(codes.Error, desc)
	case OutcomeCanceled:
		// Not an error, but it must show on the timeline: Jaeger draws an event as a
		// mark on the span's bar, where the attempt was stopped.
		if err == nil {
			span.AddEvent(canceledEvent)
		} else {
			span.AddEvent(callerCanceledEvent, trace.WithAttributes(exceptionMessageKey.String(err.Error())))
		}
	}
	span.End()
}

// The events a cancelled attempt's span ends with.
const (
	canceledEvent       = "canceled: another attempt answered first"
	callerCanceledEvent = "canceled: the caller gave up"
)

// exceptionMessageKey is OTel's exception.message, naming how a cancelled attempt
// ended without making it an error.
const exceptionMessageKey = attribute.Key("exception.message")

// CallerCanceled reports whether ctx, the context a caller gave a call, was
// cancelled: an attempt or a call cut short because its caller left is canceled,
// not failed, and no error. A deadline that passed is not a cancel: the call failed
// to answer in time.
func CallerCanceled(ctx context.Context) bool { return ctx.Err() == context.Canceled }

// Cut is outcome, or [OutcomeCanceled] when outcome is a failure and ctx, the
// caller's context, was cancelled ([CallerCanceled]).
func Cut(ctx context.Context, outcome Outcome) Outcome {
	if outcome == OutcomeFailure && CallerCanceled(ctx) {
		return OutcomeCanceled
	}
	return outcome
}

// InjectHTTP writes the trace context of ctx into h with the global propagator
// ([otel.GetTextMapPropagator]) when ctx's span is recording. Layers that make several
// attempts of one HTTP request call it on each attempt's own header, so that the
// downstream's span is a child of the attempt span rather than of the call's.
func InjectHTTP(ctx context.Context, h http.Header) {
	if trace.SpanFromContext(ctx).IsRecording() {
		otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(h))
	}
}
