package otelattr

import "go.opentelemetry.io/otel/attribute"

// ScopeName is the instrumentation scope of the spans and metrics this package makes.
const ScopeName = "github.com/deadlinekit/deadlinekit"

// Server-side span attributes.
const (
	// BudgetReceivedKey is the budget (ms) the server applied to the request.
	BudgetReceivedKey = attribute.Key("deadlinekit.budget.received_ms")
	// BudgetSourceKey is where the budget came from: a lower-case header name, or
	// "default" when none came.
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
	// ServerOverrunKey is how long (ms) the handler kept running after its deadline.
	ServerOverrunKey = attribute.Key("deadlinekit.server.overrun_ms")
)

// Client-side span attributes.
const (
	// BudgetSentKey is the budget (ms) written into an outbound request.
	BudgetSentKey = attribute.Key("deadlinekit.budget.sent_ms")
	// AttemptsKey is the number of attempts a call made (the first included).
	AttemptsKey = attribute.Key("deadlinekit.attempts")
	// RetriesKey is the number of retries a call made (attempts after the first,
	// by package retry).
	RetriesKey = attribute.Key("deadlinekit.retry.count")
	// RetryStopReasonKey says why the call did not retry again: a StopReason.
	RetryStopReasonKey = attribute.Key("deadlinekit.retry.stop_reason")
	// HedgesKey is the number of hedged (backup) attempts a call sent.
	HedgesKey = attribute.Key("deadlinekit.hedge.count")
	// HedgeWonKey is true when a hedge, not the primary, gave the answer.
	HedgeWonKey = attribute.Key("deadlinekit.hedge.won")
	// HedgeSkipKey says why a call that went through the hedging layer sent no
	// hedge: a HedgeSkip. Absent when a hedge was sent.
	HedgeSkipKey = attribute.Key("deadlinekit.hedge.skip")
	// AttemptNumberKey is the 1-based number of an attempt within its call.
	AttemptNumberKey = attribute.Key("deadlinekit.attempt.number")
	// AttemptKindKey is an AttemptKind.
	AttemptKindKey = attribute.Key("deadlinekit.attempt.kind")
	// AttemptOutcomeKey is an Outcome.
	AttemptOutcomeKey = attribute.Key("deadlinekit.attempt.outcome")
	// HTTPResendCountKey is the OTel semantic convention for the number of times an
	// HTTP request was sent before this attempt.
	HTTPResendCountKey = attribute.Key("http.request.resend_count")
	// PreviousRPCAttemptsKey is gRFC A72's attribute for the number of attempts of
	// an RPC before this one.
	PreviousRPCAttemptsKey = attribute.Key("previous-rpc-attempts")
)

// StopReason says why a call stopped retrying.
type StopReason string

// Stop reasons recorded under [RetryStopReasonKey].
const (
	StopAnswered          StopReason = "answered"           // the last attempt got an answer that is not a failure
	StopNotRetryable      StopReason = "not_retryable"      // the failure cannot succeed on retry
	StopPushback          StopReason = "pushback"           // the server's pushback was malformed or negative: do not retry
	StopPushbackOverCap   StopReason = "pushback_over_cap"  // the server asked for a longer wait than the cap
	StopRefused           StopReason = "refused"            // the downstream refused for lack of budget (504 / DEADLINE_EXCEEDED with pushback -1)
	StopDownstreamRetried StopReason = "downstream_retried" // the downstream already retried and gave up (pushback -1): the one-layer rule
	StopAttemptsExhausted StopReason = "attempts_exhausted" // the maximum number of attempts was reached
	StopDeadline          StopReason = "deadline"           // not enough time left for backoff plus an attempt
	StopBudgetEmpty       StopReason = "budget_empty"       // the retry budget had no token
	StopCallerRetries     StopReason = "caller_retries"     // an upstream layer retries; this one does not
	StopCanceled          StopReason = "canceled"           // the caller cancelled
)

// HedgeSkip says why a call sent no hedge.
type HedgeSkip string

// Reasons recorded under [HedgeSkipKey].
const (
	HedgeSkipWarmingUp     HedgeSkip = "warming_up"     // too few latencies known for the target to trust its percentile
	HedgeSkipNotIdempotent HedgeSkip = "not_idempotent" // the call may not run twice (method, no key, body not replayable)
	HedgeSkipCap           HedgeSkip = "cap"            // the extra-load cap had no token when the hedge was due
	HedgeSkipDeadline      HedgeSkip = "deadline"       // less than the hedge floor was left when the hedge was due
	HedgeSkipNotDue        HedgeSkip = "not_due"        // the call ended before its hedge delay
	HedgeSkipDisabled      HedgeSkip = "disabled"       // hedging is configured off (one attempt, or no extra load)
)

// AttemptKind says why an attempt was made.
type AttemptKind string

// Attempt kinds recorded under [AttemptKindKey].
const (
	KindPrimary AttemptKind = "primary" // the first attempt of a call
	KindRetry   AttemptKind = "retry"   // a retry after a failed attempt
	KindHedge   AttemptKind = "hedge"   // a backup sent while an earlier attempt was still running
)

// Outcome says how an attempt ended.
type Outcome string

// Attempt outcomes recorded under [AttemptOutcomeKey].
const (
	OutcomeSuccess  Outcome = "success"  // answered, and its answer was used
	OutcomeFailure  Outcome = "failure"  // failed (a retry may follow)
	OutcomeCanceled Outcome = "canceled" // canceled because another attempt won
)

// Protocol says which semantic-convention attribute an attempt span carries.
type Protocol uint8

// Protocols of an attempt.
const (
	HTTP Protocol = iota + 1 // http.request.resend_count
	GRPC                     // previous-rpc-attempts
)
