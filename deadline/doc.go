// Package deadline is the budget arithmetic of deadlinekit: how much time a request
// has left ([Remaining]), and how much of it to hand to the next hop ([Policy]).
//
// A request's deadline is the only timeout that answers "how long may this call still
// take": connect and read timeouts cover one phase of one attempt, the deadline covers
// queueing, every attempt and every backoff. This package computes with it; package
// propagate carries it on the wire. When a step cannot be paid for, the functions
// return a [*BudgetError], which also matches [context.DeadlineExceeded], instead of a
// context that is sure to fail: the caller can answer at once, degrade, or skip the
// call.
//
// This package imports the standard library only.
package deadline
