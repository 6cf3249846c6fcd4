package hedge

// Skip says why a call was sent without a hedge: [Event].Skipped, and the value of
// the span attribute deadlinekit.hedge.skip (otelattr.HedgeSkipKey) on the call's
// span.
type Skip string

// The reasons a call is sent once.
const (
	SkipWarmingUp     Skip = "warming_up"     // too few latencies known for the target to trust its percentile
	SkipNotIdempotent Skip = "not_idempotent" // the call may not run twice (method, no key, body not replayable)
	SkipCap           Skip = "cap"            // the extra-load cap had no token when the hedge was due
	SkipDeadline      Skip = "deadline"       // less than the hedge floor was left when the hedge was due
	SkipNotDue        Skip = "not_due"        // the call ended before its hedge delay (on the span only)
	SkipDisabled      Skip = "disabled"       // hedging is configured off (one attempt, or no extra load)
	SkipCovered       Skip = "covered"        // a layer above may send the request this call serves again (the chain rule)
	SkipKeyedWrite    Skip = "keyed_write"    // a write with an idempotency key ([WithKeyedWrites] hedges it)
)
