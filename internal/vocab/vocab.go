// Package vocab is the one table of the toolkit's OpenTelemetry vocabulary: every
// span attribute with where it is recorded and the values it takes, the span events,
// and every metric with its kind, unit, description and attributes.
//
// The instruments are made from [Metrics] (package internal/record), and the tests
// check against the table what is kept elsewhere by hand: package otelattr's keys
// and its doc's list of metrics, the values each key's doc names, and every
// deadlinekit.* name a doc or comment of the repository mentions. Adding a name
// starts here.
package vocab

import (
	"go.opentelemetry.io/otel/attribute"

	"github.com/deadlinekit/deadlinekit/otelattr"
)

// Place is where an attribute is recorded: a set of the places below.
type Place uint8

// The places of an attribute.
const (
	ServerSpan  Place = 1 << iota // the server span of a request
	CallSpan                      // the span of an outbound call, carrying its totals
	AttemptSpan                   // the span of one attempt of a call
	Event                         // a span event
	OnMetric                      // a metric's data points
)

// Attribute is one attribute key.
type Attribute struct {
	Key    attribute.Key
	Places Place
	// Values are the values a string attribute takes, when they are a fixed set.
	Values []string
}

// Client reports whether the attribute belongs to a call: recorded on call or
// attempt spans, never on a server span.
func (a Attribute) Client() bool {
	return a.Places&(CallSpan|AttemptSpan) != 0 && a.Places&ServerSpan == 0
}

// Kind is a metric's instrument kind, as otelattr's doc names it.
type Kind string

// The instrument kinds.
const (
	Counter   Kind = "counter"
	UpDown    Kind = "updown"
	Gauge     Kind = "gauge"
	Histogram Kind = "histogram"
)

// Metric is one metric, in scope [otelattr.ScopeName].
type Metric struct {
	Name        string
	Kind        Kind
	Unit        string
	Description string // the instrument's description
	// Note is the metric's line in otelattr's doc, after its unit.
	Note       string
	Attributes []attribute.Key
}

// The enumerated values, shared by the keys that take them.
var (
	admissions = []string{"admitted", "cannot_finish", "dropped", "overloaded", "canceled"}
	states     = []string{"closed", "half_open", "open"}
	levelNames = []string{"critical_plus", "critical", "sheddable_plus", "sheddable"}
)

// Attributes are the attribute keys of package otelattr, in its order.
var Attributes = []Attribute{
	{Key: otelattr.BudgetReceivedKey, Places: ServerSpan},
	{Key: otelattr.BudgetSourceKey, Places: ServerSpan, Values: []string{"grpc-timeout", "connect-timeout-ms", "x-envoy-expected-rq-timeout-ms", "default"}},
	{Key: otelattr.BudgetClampedKey, Places: ServerSpan},
	{Key: otelattr.ShortCircuitRejectedKey, Places: ServerSpan},
	{Key: otelattr.ShortCircuitFloorKey, Places: ServerSpan},
	{Key: otelattr.ShortCircuitRemainingKey, Places: ServerSpan},
	{Key: otelattr.ShortCircuitAdmissionKey, Places: ServerSpan, Values: admissions},
	{Key: otelattr.ShortCircuitQueuedKey, Places: ServerSpan},
	{Key: otelattr.ShortCircuitQueueWaitKey, Places: ServerSpan},
	{Key: otelattr.ShortCircuitPredictedWaitKey, Places: ServerSpan},
	{Key: otelattr.ShortCircuitWorkKey, Places: ServerSpan},
	{Key: otelattr.ShortCircuitDisplacedByKey, Places: ServerSpan, Values: levelNames},
	{Key: otelattr.ShortCircuitReasonKey, Places: OnMetric, Values: append([]string{"below_floor", "expired"}, admissions[1:]...)},
	{Key: otelattr.ServerOverrunKey, Places: ServerSpan},
	{Key: otelattr.CriticalityKey, Places: ServerSpan | OnMetric, Values: levelNames},

	{Key: otelattr.BudgetSentKey, Places: CallSpan | AttemptSpan},
	{Key: otelattr.AttemptsKey, Places: CallSpan},
	{Key: otelattr.RetryCountKey, Places: CallSpan},
	{Key: otelattr.RetryStopReasonKey, Places: CallSpan, Values: []string{"answered", "not_retryable", "pushback", "pushback_over_cap", "refused", "downstream_retried", "attempts_exhausted", "deadline", "budget_empty", "caller_retries", "canceled"}},
	{Key: otelattr.HedgeCountKey, Places: CallSpan},
	{Key: otelattr.HedgeWonKey, Places: CallSpan},
	{Key: otelattr.HedgeSkipKey, Places: CallSpan, Values: []string{"warming_up", "not_idempotent", "cap", "deadline", "not_due", "disabled", "covered", "keyed_write"}},
	{Key: otelattr.HedgeTargetKey, Places: OnMetric},
	{Key: otelattr.HedgeOutcomeKey, Places: OnMetric, Values: []string{"won", "wasted"}},

	{Key: otelattr.AttemptNumberKey, Places: AttemptSpan},
	{Key: otelattr.AttemptKindKey, Places: AttemptSpan, Values: []string{"primary", "retry", "hedge"}},
	{Key: otelattr.AttemptOutcomeKey, Places: AttemptSpan, Values: []string{"success", "failure", "canceled"}},
	{Key: otelattr.AttemptTransportResendsKey, Places: AttemptSpan},

	{Key: otelattr.BreakerTargetKey, Places: CallSpan | AttemptSpan | Event | OnMetric},
	{Key: otelattr.BreakerStateKey, Places: CallSpan | AttemptSpan | Event | OnMetric, Values: states},
	{Key: otelattr.BreakerRefusedKey, Places: CallSpan | AttemptSpan},
	{Key: otelattr.BreakerProbeKey, Places: CallSpan | AttemptSpan},
	{Key: otelattr.BreakerRetryAfterKey, Places: CallSpan | AttemptSpan},
	{Key: otelattr.BreakerFromKey, Places: Event, Values: states},
	{Key: otelattr.BreakerOutcomeKey, Places: OnMetric, Values: []string{"success", "failure", "neutral", "slow"}},
	{Key: otelattr.BreakerThrottledKey, Places: CallSpan | AttemptSpan},
	{Key: otelattr.BreakerThrottleProbabilityKey, Places: CallSpan | AttemptSpan},
	{Key: otelattr.BreakerLevelKey, Places: CallSpan | AttemptSpan | OnMetric, Values: []string{"critical_plus", "critical", "sheddable_plus", "sheddable"}},

	{Key: otelattr.DedupOutcomeKey, Places: ServerSpan | OnMetric, Values: []string{"first", "replayed", "waited", "conflict", "mismatch", "released", "store_unavailable", "malformed", "not_kept", "canceled"}},
	{Key: otelattr.DedupWaitKey, Places: ServerSpan | Event},
	{Key: otelattr.DedupStoreOpKey, Places: OnMetric, Values: []string{"acquire", "complete", "release"}},
	{Key: otelattr.DedupHolderLeftKey, Places: ServerSpan},

	{Key: otelattr.DedupReplayedKey, Places: CallSpan | AttemptSpan},
	{Key: otelattr.DedupConflictKey, Places: CallSpan | AttemptSpan},
	{Key: otelattr.DedupComeBackKey, Places: CallSpan | AttemptSpan},
	{Key: otelattr.IdempotencyKeyHashKey, Places: CallSpan},
}

// Events are the names of the span events the toolkit adds.
var Events = []string{otelattr.BreakerStateChangeEvent, otelattr.DedupWaitedEvent}

// Metrics are the toolkit's metrics, in the order of otelattr's doc.
var Metrics = []Metric{
	{Name: "deadlinekit.retry.retries", Kind: Counter, Unit: "{retry}",
		Description: "Retries sent: attempts after the first, by package retry."},
	{Name: "deadlinekit.retry.budget_refusals", Kind: Counter, Unit: "{refusal}",
		Description: "Retries not sent because the retry budget was empty."},
	{Name: "deadlinekit.hedge.sent", Kind: Counter, Unit: "{hedge}",
		Description: "Hedged (backup) attempts sent."},
	{Name: "deadlinekit.hedge.wins", Kind: Counter, Unit: "{hedge}",
		Description: "Calls answered by a hedge rather than the primary."},
	{Name: "deadlinekit.hedge.outcomes", Kind: Counter, Unit: "{hedge}",
		Description: "Hedges sent, once their call ended, by target and outcome (won or wasted).",
		Note:        "per HedgeTargetKey and HedgeOutcomeKey", Attributes: []attribute.Key{otelattr.HedgeTargetKey, otelattr.HedgeOutcomeKey}},
	{Name: "deadlinekit.shortcircuit.rejections", Kind: Counter, Unit: "{request}",
		Description: "Requests refused before their handler ran, by reason and level.",
		Note:        "by ShortCircuitReasonKey and CriticalityKey", Attributes: []attribute.Key{otelattr.ShortCircuitReasonKey, otelattr.CriticalityKey}},
	{Name: "deadlinekit.shortcircuit.in_flight", Kind: UpDown, Unit: "{request}",
		Description: "Handlers running under a concurrency limit.",
		Note:        "handlers running under a concurrency limit"},
	{Name: "deadlinekit.shortcircuit.queue_length", Kind: UpDown, Unit: "{request}",
		Description: "Requests waiting for a slot of a concurrency limit.",
		Note:        "requests waiting for a slot"},
	{Name: "deadlinekit.shortcircuit.limit", Kind: Gauge, Unit: "{request}",
		Description: "Current concurrency limit.",
		Note:        "the current concurrency limit"},
	{Name: "deadlinekit.shortcircuit.queue_wait", Kind: Histogram, Unit: "s",
		Description: "Time queued requests waited for a slot.",
		Note:        "time queued requests waited"},
	{Name: "deadlinekit.server.budget", Kind: Histogram, Unit: "s",
		Description: "Budget applied to inbound requests.",
		Note:        "budgets applied"},
	{Name: "deadlinekit.server.overrun", Kind: Histogram, Unit: "s",
		Description: "Time handlers kept running after their deadline.",
		Note:        "handler time past the deadline"},
	{Name: "deadlinekit.breaker.state", Kind: Gauge, Unit: "{state}",
		Description: "State of each circuit: 0 closed, 1 half-open, 2 open.",
		Note:        "per target: 0 closed, 1 half-open, 2 open", Attributes: []attribute.Key{otelattr.BreakerTargetKey}},
	{Name: "deadlinekit.breaker.transitions", Kind: Counter, Unit: "{transition}",
		Description: "Circuit state changes, by target and new state.",
		Note:        "per target and new state", Attributes: []attribute.Key{otelattr.BreakerTargetKey, otelattr.BreakerStateKey}},
	{Name: "deadlinekit.breaker.refused", Kind: Counter, Unit: "{call}",
		Description: "Calls refused by an open circuit before sending.",
		Note:        "per target", Attributes: []attribute.Key{otelattr.BreakerTargetKey}},
	{Name: "deadlinekit.breaker.outcomes", Kind: Counter, Unit: "{call}",
		Description: "Calls through a circuit breaker, by target and outcome.",
		Note:        "per target and BreakerOutcomeKey", Attributes: []attribute.Key{otelattr.BreakerTargetKey, otelattr.BreakerOutcomeKey}},
	{Name: "deadlinekit.breaker.throttled", Kind: Counter, Unit: "{call}",
		Description: "Calls the adaptive throttle refused before sending, by target and level.",
		Note:        "per target and BreakerLevelKey", Attributes: []attribute.Key{otelattr.BreakerTargetKey, otelattr.BreakerLevelKey}},
	{Name: "deadlinekit.dedup.outcomes", Kind: Counter, Unit: "{request}",
		Description: "Keyed requests, by what deduplication did with them.",
		Note:        "by DedupOutcomeKey", Attributes: []attribute.Key{otelattr.DedupOutcomeKey}},
	{Name: "deadlinekit.dedup.wait", Kind: Histogram, Unit: "s",
		Description: "Time repeats waited for the first request's answer.",
		Note:        "time repeats waited for the first's answer"},
	{Name: "deadlinekit.dedup.store.duration", Kind: Histogram, Unit: "s",
		Description: "Latency of the deduplication store's operations.",
		Note:        "by DedupStoreOpKey", Attributes: []attribute.Key{otelattr.DedupStoreOpKey}},
}

// Lookup returns the metric named name; it panics on a name not in [Metrics], a
// mistake the package's tests catch.
func Lookup(name string) Metric {
	for _, m := range Metrics {
		if m.Name == name {
			return m
		}
	}
	panic("vocab: no metric " + name)
}

// Find returns the attribute with key k, and whether there is one.
func Find(k attribute.Key) (Attribute, bool) {
	for _, a := range Attributes {
		if a.Key == k {
			return a, true
		}
	}
	return Attribute{}, false
}
