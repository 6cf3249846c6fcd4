// Package record writes deadlinekit's telemetry, in the vocabulary of package
// otelattr, through the OTel API only: the call span and its attempt spans, the
// budgets received and sent, the guard's and the concurrency limit's decisions, the
// breaker's states and outcomes, and the metrics. The layer packages call it; with
// no SDK installed every function is a no-op that does not allocate. Spans come from
// the context; metrics from the global MeterProvider, read on first use, so that an
// SDK installed at start-up is picked up.
package record
