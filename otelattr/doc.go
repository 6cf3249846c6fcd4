// Package otelattr is the OpenTelemetry vocabulary of deadlinekit: the names of the
// span attributes, the span event and the metrics the toolkit records, for the
// queries, dashboards and tests of its users. The layers record them themselves,
// through the OTel API only: install an SDK (and usually otelhttp or otelgrpc) to see
// them; with none installed, recording costs nothing.
//
// Each outbound call has one span, the call span, that carries the call's totals: the
// client span of the user's instrumentation when it is outermost (otelhttp's
// transport, grpc-go's OpenTelemetry plugin), else a client span the toolkit starts,
// named as gRFC A72 names call spans. Each attempt is a child span of it, and the
// downstream's server span hangs under the attempt that reached it. A server span
// carries what the server did with the request, never a call's totals.
//
// The metrics, in scope [ScopeName]:
//
//	deadlinekit.retry.retries              counter    {retry}
//	deadlinekit.retry.budget_refusals      counter    {refusal}
//	deadlinekit.hedge.sent                 counter    {hedge}
//	deadlinekit.hedge.wins                 counter    {hedge}
//	deadlinekit.hedge.outcomes             counter    {hedge}       per HedgeTargetKey and HedgeOutcomeKey
//	deadlinekit.shortcircuit.rejections    counter    {request}     by ShortCircuitReasonKey and CriticalityKey
//	deadlinekit.shortcircuit.in_flight     updown     {request}     handlers running under a concurrency limit
//	deadlinekit.shortcircuit.queue_length  updown     {request}     requests waiting for a slot
//	deadlinekit.shortcircuit.limit         gauge      {request}     the current concurrency limit
//	deadlinekit.shortcircuit.queue_wait    histogram  s             time queued requests waited
//	deadlinekit.server.budget              histogram  s             budgets applied
//	deadlinekit.server.overrun             histogram  s             handler time past the deadline
//	deadlinekit.breaker.state              gauge      {state}       per target: 0 closed, 1 half-open, 2 open
//	deadlinekit.breaker.transitions        counter    {transition}  per target and new state
//	deadlinekit.breaker.refused            counter    {call}        per target
//	deadlinekit.breaker.outcomes           counter    {call}        per target and BreakerOutcomeKey
//	deadlinekit.breaker.throttled          counter    {call}        per target and BreakerLevelKey
//	deadlinekit.dedup.outcomes             counter    {request}     by DedupOutcomeKey
//	deadlinekit.dedup.wait                 histogram  s             time repeats waited for the first's answer
//	deadlinekit.dedup.store.duration       histogram  s             by DedupStoreOpKey
//
// A metric's attributes take a bounded set of values: the breaker's the target,
// whose number package breaker bounds; the hedge's the target (a host, or a gRPC
// full method), at most 1024 per Hedger; the others a fixed set of reasons, outcomes
// or operations. No other metric's cost grows with routes or methods; per-route
// detail is on the spans. internal/vocab holds these names in one table, which the
// instruments are made from and this list is checked against.
package otelattr
