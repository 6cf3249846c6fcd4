package record

import "go.opentelemetry.io/otel/attribute"

// StopReason says why a call stopped retrying.
type StopReason string

// Stop reasons recorded under [otelattr.RetryStopReasonKey].
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

// Reasons recorded under [otelattr.HedgeSkipKey].
const (
	HedgeSkipWarmingUp     HedgeSkip = "warming_up"     // too few latencies known for the target to trust its percentile
	HedgeSkipNotIdempotent HedgeSkip = "not_idempotent" // the call may not run twice (method, no key, body not replayable)
	HedgeSkipCap           HedgeSkip = "cap"            // the extra-load cap had no token when the hedge was due
	HedgeSkipDeadline      HedgeSkip = "deadline"       // less than the hedge floor was left when the hedge was due
	HedgeSkipNotDue        HedgeSkip = "not_due"        // the call ended before its hedge delay
	HedgeSkipDisabled      HedgeSkip = "disabled"       // hedging is configured off (one attempt, or no extra load)
	HedgeSkipCovered       HedgeSkip = "covered"        // a layer above may send the request this call serves again (the chain rule)
	HedgeSkipKeyedWrite    HedgeSkip = "keyed_write"    // a write with an idempotency key: against a dedup its copy waits for the first (hedge.WithKeyedWrites hedges it)
)

// AttemptKind says why an attempt was made.
type AttemptKind string

// Attempt kinds recorded under [otelattr.AttemptKindKey].
const (
	KindPrimary AttemptKind = "primary" // the first attempt of a call
	KindRetry   AttemptKind = "retry"   // a retry after a failed attempt
	KindHedge   AttemptKind = "hedge"   // a backup sent while an earlier attempt was still running
)

// Outcome says how an attempt ended.
type Outcome string

// Attempt outcomes recorded under [otelattr.AttemptOutcomeKey].
const (
	OutcomeSuccess  Outcome = "success"  // answered, and its answer was used
	OutcomeFailure  Outcome = "failure"  // failed (a retry may follow); an error
	OutcomeCanceled Outcome = "canceled" // cut short: another attempt answered first, or the caller gave up; no error
)

// Protocol says which semantic-convention attribute an attempt span carries.
type Protocol uint8

// Protocols of an attempt.
const (
	HTTP Protocol = iota + 1 // http.request.resend_count
	GRPC                     // previous-rpc-attempts
)

// The attempt-count attributes of the protocols' own conventions, on attempt spans.
const (
	httpResendCountKey     = attribute.Key("http.request.resend_count") // OTel's HTTP semantic conventions
	previousRPCAttemptsKey = attribute.Key("previous-rpc-attempts")     // gRFC A72
)
