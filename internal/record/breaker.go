package record

import (
	"context"
	"time"

	"github.com/deadlinekit/deadlinekit/otelattr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// BreakerState is a circuit's state.
type BreakerState string

// States recorded under [otelattr.BreakerStateKey] and [otelattr.BreakerFromKey].
const (
	BreakerClosed   BreakerState = "closed"    // calls go through, outcomes are counted
	BreakerOpen     BreakerState = "open"      // calls are refused until the next probe
	BreakerHalfOpen BreakerState = "half_open" // a few probes go through
)

// gaugeValue is the state's value on the deadlinekit.breaker.state gauge.
func (s BreakerState) gaugeValue() int64 {
	switch s {
	case BreakerHalfOpen:
		return 1
	case BreakerOpen:
		return 2
	}
	return 0
}

// BreakerOutcome is what a call said of its target, on the outcomes metric.
type BreakerOutcome string

// Outcomes recorded under [otelattr.BreakerOutcomeKey]. A slow call is counted twice: as its
// success or failure, and as slow.
const (
	BreakerSuccess BreakerOutcome = "success" // a working server answered
	BreakerFailure BreakerOutcome = "failure" // the target did not answer, or timed out with a fair budget
	BreakerNeutral BreakerOutcome = "neutral" // counted neither way (caller cancelled, starved, refused before sending)
	BreakerSlow    BreakerOutcome = "slow"    // slower than the slow-call threshold
)

var breakerOutcomes = [...]BreakerOutcome{BreakerSuccess, BreakerFailure, BreakerNeutral, BreakerSlow}

// BreakerTarget records the telemetry of one circuit. Its metric attributes are
// made once, by [NewBreakerTarget], so that recording an outcome does not allocate.
// The number of targets is bounded by the breaker; a nil *BreakerTarget does
// nothing.
type BreakerTarget struct {
	target   attribute.KeyValue
	outcomes [len(breakerOutcomes)][]metric.AddOption
	refused  []metric.AddOption
	states   [3][]metric.RecordOption // by gaugeValue
	moves    [3][]metric.AddOption    // transitions, by the new state's gaugeValue
}

// NewBreakerTarget returns the recorder of the circuit named target, and sets its
// state gauge to closed.
func NewBreakerTarget(target string) *BreakerTarget {
	t := &BreakerTarget{target: otelattr.BreakerTargetKey.String(target)}
	for i, o := range breakerOutcomes {
		t.outcomes[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(t.target, otelattr.BreakerOutcomeKey.String(string(o))))}
	}
	one := attribute.NewSet(t.target)
	t.refused = []metric.AddOption{metric.WithAttributeSet(one)}
	for _, s := range []BreakerState{BreakerClosed, BreakerHalfOpen, BreakerOpen} {
		t.states[s.gaugeValue()] = []metric.RecordOption{metric.WithAttributeSet(one)}
		t.moves[s.gaugeValue()] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(t.target, otelattr.BreakerStateKey.String(string(s))))}
	}
	instruments().breakerState.Record(context.Background(), 0, t.states[0]...)
	return t
}

// RecordOutcome counts a call's outcome in deadlinekit.breaker.outcomes (and, when
// slow, once more as slow). It writes nothing on spans.
func (t *BreakerTarget) RecordOutcome(ctx context.Context, o BreakerOutcome, slow bool) {
	if t == nil {
		return
	}
	in := instruments()
	i := 0
	switch o {
	case BreakerFailure:
		i = 1
	case BreakerNeutral:
		i = 2
	case BreakerSlow:
		i = 3
	}
	in.breakerOutcomes.Add(ctx, 1, t.outcomes[i]...)
	if slow && i != 3 {
		in.breakerOutcomes.Add(ctx, 1, t.outcomes[3]...)
	}
}

// RecordRefused records a call refused by the circuit in state, whose next probe is
// retryAfter away: on the call's span (and the attempt's) and in
// deadlinekit.breaker.refused.
func (t *BreakerTarget) RecordRefused(ctx context.Context, state BreakerState, retryAfter time.Duration) {
	if t == nil {
		return
	}
	instruments().breakerRefused.Add(ctx, 1, t.refused...)
	forCallSpans(ctx, func(s trace.Span, attempt bool) {
		s.SetAttributes(t.target, otelattr.BreakerStateKey.String(string(state)), otelattr.BreakerRefusedKey.Bool(true),
			otelattr.BreakerRetryAfterKey.Float64(millis(retryAfter)))
		if !attempt {
			s.SetAttributes(otelattr.BreakerProbeKey.Bool(false)) // an earlier attempt's probe
		}
	})
}

// RecordThrottle records the adaptive throttle's decision on a call of level (its
// wire form) it refused with probability p, or let through although p was above
// zero: on the call's span (and the attempt's), and, refused, in
// deadlinekit.breaker.throttled.
func (t *BreakerTarget) RecordThrottle(ctx context.Context, level string, p float64, refused bool) {
	if t == nil {
		return
	}
	lv := otelattr.BreakerLevelKey.String(level)
	if refused {
		instruments().breakerThrottled.Add(ctx, 1, metric.WithAttributes(t.target, lv))
	}
	forCallSpans(ctx, func(s trace.Span, _ bool) {
		s.SetAttributes(t.target, lv, otelattr.BreakerThrottledKey.Bool(refused), otelattr.BreakerThrottleProbabilityKey.Float64(p))
	})
}

// RecordProbe records, on the call's span (and the attempt's), that the call was let
// through as a probe of the circuit in state half-open.
func (t *BreakerTarget) RecordProbe(ctx context.Context) {
	if t == nil {
		return
	}
	forCallSpans(ctx, func(s trace.Span, attempt bool) {
		s.SetAttributes(t.target, otelattr.BreakerStateKey.String(string(BreakerHalfOpen)), otelattr.BreakerProbeKey.Bool(true))
		if !attempt {
			s.SetAttributes(otelattr.BreakerRefusedKey.Bool(false), otelattr.BreakerRetryAfterKey.Float64(0)) // an earlier attempt's refusal
		}
	})
}

// RecordTransition records that the call of ctx moved its circuit from one state to
// another: an event on the call's span (and the attempt's), the state gauge, and
// deadlinekit.breaker.transitions.
func (t *BreakerTarget) RecordTransition(ctx context.Context, from, to BreakerState) {
	if t == nil {
		return
	}
	in := instruments()
	in.breakerState.Record(ctx, to.gaugeValue(), t.states[to.gaugeValue()]...)
	in.breakerTransitions.Add(ctx, 1, t.moves[to.gaugeValue()]...)
	forCallSpans(ctx, func(s trace.Span, _ bool) {
		s.AddEvent(otelattr.BreakerStateChangeEvent, trace.WithAttributes(t.target, otelattr.BreakerFromKey.String(string(from)), otelattr.BreakerStateKey.String(string(to))))
	})
}

// forCallSpans calls f with each recording span of ctx that belongs to the call: the
// attempt's span when ctx's span is one (attempt true), and the call's span
// ([StartCall]); without a call, ctx's span when it is a client span (the user's
// instrumentation made it for this call). Never a server span.
func forCallSpans(ctx context.Context, f func(s trace.Span, attempt bool)) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attempt := isAttempt(ctx, span)
	if attempt {
		f(span, true)
	}
	if c := callFrom(ctx); c != nil {
		if c.span != span || !attempt {
			f(c.span, false)
		}
		return
	}
	if !attempt && isClientSpan(span) {
		f(span, false)
	}
}
