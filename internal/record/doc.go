// Package record writes deadlinekit's telemetry, in the vocabulary of package
// otelattr, through the OTel API only: the call span and its attempt spans, the
// budgets received and sent, the guard's and the concurrency limit's decisions, the
// breaker's states and outcomes, and the metrics. The layer packages call it; with
// no SDK installed every function is a no-op that does not allocate. Spans come from
// the context; metrics from the global MeterProvider, read on first use, so that an
// SDK installed at start-up is picked up.
//
// One mechanism in one place: how a call's span ends (its totals written when the
// round trip returns, the toolkit's own span ended with the answer's body, at once
// when a callback panics) lives here, in [Call.RoundTripHTTP] and [Call.EndHTTP]
// for HTTP, [Call.Unary] for a unary RPC; the layers that start a call end it through
// them, never with a copy of their own.
package record
