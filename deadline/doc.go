// Package deadline is the budget arithmetic of deadlinekit: how much time a request
// has left, and how much of it to hand to the next hop.
//
// A request's deadline is the only timeout that answers the question "how long may
// this call still take". Connect and read timeouts cover one phase of one attempt; the
// deadline covers queueing, every attempt and every backoff, and it must travel
// downstream so that a service stops working the moment its caller has given up. This
// package computes with it; package propagate carries it on the wire.
//
// # Time left
//
// [Remaining] reports the time left before a context's deadline. It is computed from
// the monotonic clock reading that [context.WithTimeout] and [context.WithDeadline]
// keep in the deadline, so a wall-clock step (NTP, a VM migration) never changes it.
//
// # Deriving a downstream budget
//
// A [Policy] is plain data that says how to derive a downstream context from an
// inbound one:
//
//	child deadline = min(parent deadline − reserve, now + MaxPerHop)
//	reserve        = Reserve + ReserveFraction × time left
//
// The reserve is time the caller keeps for its own work after the downstream has
// answered (decoding, a second call, writing the response). MaxPerHop caps what any one
// hop may be given. When the parent has no deadline, Default (if set) stands in for it.
// When the child's budget would be below Floor, or nothing is left at all,
// [Policy.Derive] returns a [*BudgetError] instead of a context that is sure to fail:
// the caller can answer at once, degrade, or skip the call.
//
// The zero Policy passes the parent's deadline through unchanged. [DefaultPolicy] adds a
// default budget of [DefaultBudget] for contexts that have none. Whatever the policy, a
// derived deadline is never later than the parent's.
//
// # Attempts
//
// A call that is retried or hedged spends one deadline on all its attempts. The timeout
// of one attempt is min(per-attempt limit, time left) ([AttemptTimeout]), so the last
// attempt never gets the full limit when the deadline is nearer than that.
//
// # Errors
//
// [ErrInsufficientBudget] is the sentinel for "not enough time left"; the typed
// [*BudgetError] carries the numbers (Remaining, Needed) and also matches
// [context.DeadlineExceeded] under [errors.Is], so code that already handles an expired
// context handles it too. The mapping to the wire (gRPC DeadlineExceeded, HTTP 504)
// lives in the adapters of packages propagate and shortcircuit.
//
// This package imports the standard library only.
package deadline
