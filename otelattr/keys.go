package otelattr

import "go.opentelemetry.io/otel/attribute"

// ScopeName is the instrumentation scope of the spans and metrics the toolkit makes.
const ScopeName = "github.com/deadlinekit/deadlinekit"

// Attributes of a server span (packages propagate and shortcircuit).
const (
	// BudgetReceivedKey is the budget (ms) the server applied to the request.
	BudgetReceivedKey = attribute.Key("deadlinekit.budget.received_ms")
	// BudgetSourceKey is where the budget came from: "grpc-timeout",
	// "connect-timeout-ms", "x-envoy-expected-rq-timeout-ms", or "default" when none
	// came.
	BudgetSourceKey = attribute.Key("deadlinekit.budget.source")
	// BudgetClampedKey is true when the inbound budget was above the server's
	// maximum and was cut to it.
	BudgetClampedKey = attribute.Key("deadlinekit.budget.clamped")
	// ShortCircuitRejectedKey is true when the server refused the request before its
	// handler ran, for lack of budget.
	ShortCircuitRejectedKey = attribute.Key("deadlinekit.shortcircuit.rejected")
	// ShortCircuitFloorKey is the floor (ms) the request's remaining budget was held to.
	ShortCircuitFloorKey = attribute.Key("deadlinekit.shortcircuit.floor_ms")
	// ShortCircuitRemainingKey is the budget (ms) left when the guard decided.
	ShortCircuitRemainingKey = attribute.Key("deadlinekit.shortcircuit.remaining_ms")
	// ShortCircuitAdmissionKey is what a concurrency limit did with the request:
	// "admitted", "cannot_finish", "dropped", "overloaded" or "canceled".
	ShortCircuitAdmissionKey = attribute.Key("deadlinekit.shortcircuit.admission")
	// ShortCircuitQueuedKey is true when the request waited for a slot of a
	// concurrency limit.
	ShortCircuitQueuedKey = attribute.Key("deadlinekit.shortcircuit.queued")
	// ShortCircuitQueueWaitKey is how long (ms) a queued request waited for a slot.
	ShortCircuitQueueWaitKey = attribute.Key("deadlinekit.shortcircuit.queue_wait_ms")
	// ShortCircuitPredictedWaitKey is, for a request refused on arrival by a
	// concurrency limit, the wait (ms) it was predicted to have for a slot.
	ShortCircuitPredictedWaitKey = attribute.Key("deadlinekit.shortcircuit.predicted_wait_ms")
	// ShortCircuitWorkKey is, for a request a concurrency limit refused as unable to
	// finish, the time (ms) it had to have left once it got a slot: the handler's
	// mean duration and twice its deviation.
	ShortCircuitWorkKey = attribute.Key("deadlinekit.shortcircuit.work_ms")
	// ShortCircuitDisplacedByKey is, for a request refused after its place in the
	// queue of a concurrency limit was given to a newcomer the queue serves first,
	// the newcomer's level (package criticality): "critical_plus", "critical",
	// "sheddable_plus" or "sheddable".
	ShortCircuitDisplacedByKey = attribute.Key("deadlinekit.shortcircuit.displaced_by")
	// ShortCircuitReasonKey is a refusal's reason on the
	// deadlinekit.shortcircuit.rejections metric: "below_floor", "expired", or one of
	// the limit's refusals of [ShortCircuitAdmissionKey].
	ShortCircuitReasonKey = attribute.Key("deadlinekit.shortcircuit.reason")
	// ServerOverrunKey is how long (ms) the handler kept running after its deadline.
	ServerOverrunKey = attribute.Key("deadlinekit.server.overrun_ms")
	// CriticalityKey is the request's level (package criticality), when one was
	// read from a trusted caller's deadlinekit-criticality header or set by the
	// server (deadlinekit.WithCriticality): "critical_plus", "critical",
	// "sheddable_plus" or "sheddable". Absent: critical, the default. It is also on
	// the deadlinekit.shortcircuit.rejections metric, the refused request's level.
	CriticalityKey = attribute.Key("deadlinekit.criticality")
)

// Attributes of a call span: the totals of one outbound call (packages propagate,
// retry and hedge).
const (
	// BudgetSentKey is the budget (ms) written into an outbound request: on the
	// call span the first attempt's, on each attempt span its own.
	BudgetSentKey = attribute.Key("deadlinekit.budget.sent_ms")
	// AttemptsKey is the number of copies of the call that were sent, retries and
	// hedges included, and net/http's own resends ([AttemptTransportResendsKey]).
	AttemptsKey = attribute.Key("deadlinekit.attempts")
	// RetryCountKey is the number of retries a call made (attempts after the first,
	// by package retry).
	RetryCountKey = attribute.Key("deadlinekit.retry.count")
	// RetryStopReasonKey says why the call did not retry again: "answered",
	// "not_retryable", "pushback" (the server's pushback said not to, or was
	// malformed), "pushback_over_cap" (it asked for a longer wait than the cap),
	// "refused" (the downstream refused for lack of budget), "downstream_retried"
	// (the one-layer rule), "attempts_exhausted", "deadline" (no time for a backoff
	// and an attempt), "budget_empty" (the retry budget had no token),
	// "caller_retries" (a layer upstream retries) or "canceled".
	RetryStopReasonKey = attribute.Key("deadlinekit.retry.stop_reason")
	// HedgeCountKey is the number of hedged (backup) attempts a call sent.
	HedgeCountKey = attribute.Key("deadlinekit.hedge.count")
	// HedgeWonKey is true when a hedge, not the primary, gave the answer.
	HedgeWonKey = attribute.Key("deadlinekit.hedge.won")
	// HedgeSkipKey says why a call that went through the hedging layer sent no
	// hedge: "warming_up" (too few latencies known), "not_idempotent", "cap" (the
	// extra-load cap had no token), "deadline" (less than the floor left when the
	// hedge was due), "not_due" (the call ended first), "disabled", "covered" (the
	// request the call serves is one a layer above may send again: the chain rule of
	// package hedge) or "keyed_write" (a write with an idempotency key, which package
	// hedge does not hedge unless told to). Absent when a hedge was sent.
	HedgeSkipKey = attribute.Key("deadlinekit.hedge.skip")
)

// Attributes of package hedge's per-target metric, deadlinekit.hedge.outcomes.
const (
	// HedgeTargetKey is the target a hedge was sent to: the host (HTTP) or the full
	// method (gRPC); "other" beyond the 1024 targets a Hedger keeps.
	HedgeTargetKey = attribute.Key("deadlinekit.hedge.target")
	// HedgeOutcomeKey is what became of a hedge that was sent, once its call ended:
	// "won" (its answer was the call's) or "wasted" (the primary or another copy
	// answered, or no copy succeeded).
	HedgeOutcomeKey = attribute.Key("deadlinekit.hedge.outcome")
)

// Attributes of an attempt span, a child of the call span (packages retry and
// hedge). An attempt span also carries the number of attempts before it under the
// name its protocol's conventions give it: http.request.resend_count (OTel's HTTP
// semantic conventions), or previous-rpc-attempts (gRFC A72).
const (
	// AttemptNumberKey is the 1-based number of an attempt within its call.
	AttemptNumberKey = attribute.Key("deadlinekit.attempt.number")
	// AttemptKindKey is why the attempt was made: "primary", "retry" or "hedge".
	AttemptKindKey = attribute.Key("deadlinekit.attempt.kind")
	// AttemptOutcomeKey is how the attempt ended: "success", "failure" (its span's
	// status is Error), or "canceled" (another attempt answered first, or the caller
	// gave up; not an error).
	AttemptOutcomeKey = attribute.Key("deadlinekit.attempt.outcome")
	// AttemptTransportResendsKey is the number of times net/http itself sent an
	// HTTP attempt again (a replayable request, such as a POST carrying an
	// Idempotency-Key, whose reused connection closed before an answer): each
	// reached the server, and each counts in the call's [AttemptsKey]. Absent when
	// there was none.
	AttemptTransportResendsKey = attribute.Key("deadlinekit.attempt.transport_resends")
)

// Circuit breaker attributes (package breaker): on the call's span (and the
// attempt's, under a retry layer) when a call was refused or was a probe, on the
// state-change event, and on the breaker's metrics. A call's span says what the
// breaker did with its last attempt: a refusal followed by a probe reads refused
// false, probe true (each attempt's span keeps its own).
const (
	// BreakerTargetKey is the circuit's name: "https://host:443", a gRPC target, or
	// the key the user chose.
	BreakerTargetKey = attribute.Key("deadlinekit.breaker.target")
	// BreakerStateKey is the circuit's state, "closed", "half_open" or "open", when
	// the call was refused or let through as a probe; on a state-change event, the
	// new state.
	BreakerStateKey = attribute.Key("deadlinekit.breaker.state")
	// BreakerRefusedKey is true when the breaker refused the call: nothing was sent.
	BreakerRefusedKey = attribute.Key("deadlinekit.breaker.refused")
	// BreakerProbeKey is true when the call was let through as a half-open probe.
	BreakerProbeKey = attribute.Key("deadlinekit.breaker.probe")
	// BreakerRetryAfterKey is the time (ms) until the refusing circuit's next probe.
	BreakerRetryAfterKey = attribute.Key("deadlinekit.breaker.retry_after_ms")
	// BreakerFromKey is the state a circuit left, on a state-change event: "closed",
	// "half_open" or "open".
	BreakerFromKey = attribute.Key("deadlinekit.breaker.from")
	// BreakerOutcomeKey is what a call said of its target, on the outcomes metric:
	// "success", "failure", "neutral" (counted neither way: the caller cancelled or
	// gave too little time, or the call was refused before sending) or "slow".
	BreakerOutcomeKey = attribute.Key("deadlinekit.breaker.outcome")
	// BreakerThrottledKey is true when the adaptive throttle refused the call
	// (nothing was sent), false when it let through a call it might have refused
	// (its probability above zero).
	BreakerThrottledKey = attribute.Key("deadlinekit.breaker.throttled")
	// BreakerThrottleProbabilityKey is the probability, in [0, 1), with which the
	// adaptive throttle refused calls of the call's level when it decided.
	BreakerThrottleProbabilityKey = attribute.Key("deadlinekit.breaker.throttle_probability")
	// BreakerLevelKey is the level of criticality the adaptive throttle weighed a
	// call at, on its span and the throttled metric: "critical_plus", "critical",
	// "sheddable_plus" or "sheddable".
	BreakerLevelKey = attribute.Key("deadlinekit.breaker.level")
)

// BreakerStateChangeEvent is the name of the span event a call's span gets when
// that call changed its circuit's state.
const BreakerStateChangeEvent = "breaker state change"

// Deduplication attributes (package dedup): on the server span of a request that
// carried an idempotency key, and on the dedup metrics.
const (
	// DedupOutcomeKey is what deduplication did with the request: "first" (it ran
	// and its answer was stored), "replayed" (it got the stored answer), "waited"
	// (it waited for the first's answer, then got it), "conflict" (the first still
	// ran past this one's budget: 409 / Aborted), "mismatch" (the key belongs to
	// another request), "released" (it ran but did not complete, and its key was
	// given up), "store_unavailable", "malformed" (the key was refused), "not_kept"
	// (the first's answer was too large to store) or "canceled" (its caller left
	// while it waited).
	DedupOutcomeKey = attribute.Key("deadlinekit.dedup.outcome")
	// DedupWaitKey is how long (ms) a repeat waited for the first request's answer.
	DedupWaitKey = attribute.Key("deadlinekit.dedup.wait_ms")
	// DedupStoreOpKey is the store operation on deadlinekit.dedup.store.duration:
	// "acquire", "complete", "release".
	DedupStoreOpKey = attribute.Key("deadlinekit.dedup.store.op")
)

// The dedup story of a repeat, on its server span.
const (
	// DedupHolderLeftKey is, on a repeat refused because the first request with its
	// key still runs (outcome "conflict"), the time (ms) until that first's lease
	// ends, as last seen: its deadline plus the lease margin. The come-back sent
	// (Retry-After, grpc-retry-pushback-ms) is this less the margin.
	DedupHolderLeftKey = attribute.Key("deadlinekit.dedup.holder_left_ms")
	// DedupWaitedEvent is the name of the span event a repeat's server span gets
	// when it stopped waiting for the first request with its key (answered,
	// released, or past the repeat's budget), with deadlinekit.dedup.wait_ms: how
	// long that wait was.
	DedupWaitedEvent = "waited for the first request"
)

// Deduplication seen from the caller (package retry): what a deduping server
// answered a keyed call, on each attempt's span and on the call's span.
const (
	// DedupReplayedKey is true when the answer was the stored answer of the first
	// request with the call's key (Idempotent-Replayed: true, gRPC header metadata
	// idempotent-replayed: true). On the call span, the answer the caller got.
	DedupReplayedKey = attribute.Key("deadlinekit.dedup.replayed")
	// DedupConflictKey is true when the server answered that the first request with
	// the key still ran (409 / ABORTED with a come-back). On the call span, true when
	// any attempt met one.
	DedupConflictKey = attribute.Key("deadlinekit.dedup.conflict")
	// DedupComeBackKey is the come-back (ms) a conflict said: when the first
	// request's lease ends, or sooner. On the call span, the last conflict's.
	DedupComeBackKey = attribute.Key("deadlinekit.dedup.come_back_ms")
	// IdempotencyKeyHashKey is, on the call span of a keyed call, the first 16 hex
	// digits of the SHA-256 of its idempotency key: enough to find the call's spans
	// and the server's, never the key itself.
	IdempotencyKeyHashKey = attribute.Key("deadlinekit.idempotency_key.hash")
)
