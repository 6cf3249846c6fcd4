// Package otelattr is the OpenTelemetry vocabulary of deadlinekit and the functions
// that record it: how much budget a hop received and passed on, how many attempts a
// call took and why it stopped, whether a hedge fired and won, whether a server
// refused a request for lack of budget, and how long a handler kept working after its
// deadline.
//
// The other packages call these functions themselves; a user only installs an OTel
// SDK (and usually otelhttp / otelgrpc) to see the result. The package uses the OTel
// API only, never the SDK: with no SDK installed, every function is a no-op that does
// not allocate. Spans come from the context (the user's otelhttp / otelgrpc span, or
// the attempt span below), and metrics from the global MeterProvider
// ([go.opentelemetry.io/otel.GetMeterProvider]), so an SDK installed at any time is
// picked up.
//
// # One span per call, attempts as its children
//
// Each outbound call has one span of its own, the call span, that carries the call's
// totals: the attempts it made, its retries and why it stopped, the hedges it sent and
// whether one won (or why none was sent), the budget it passed on. The outermost
// layer of the call starts it ([StartCall]) and the layers beneath join it. It is the
// client span made for the call by the user's instrumentation when there is one
// (otelhttp's transport, grpc-go's OpenTelemetry plugin, gRFC A72), and otherwise a
// client span the toolkit starts, named as A72 names call spans ("Sent.pkg.Service.Method")
// or by the HTTP method ("GET"): under otelgrpc, whose stats handler makes one span
// per attempt below the interceptors, and with no instrumentation. A server span
// never carries a call's totals, and two calls from one handler have two call spans.
//
// Each attempt of a call (package retry, package hedge) is a child span of the call
// span, in the style of gRFC A72: its number within the call (whichever layer made
// it), its kind (primary, retry, hedge), its outcome and the budget it was sent
// with; the downstream server's span hangs under the attempt that reached it. Layers
// stacked on one call share attempts: with hedging under retry, the hedging layer's
// primary is the retry layer's attempt (no span of its own), and its hedge is another
// attempt of the call. Every attempt span ends before its call span; a cancelled
// loser ends "canceled", with an event saying so, not as an error. In Jaeger, a
// hedged call shows as two overlapping attempt spans under the call. Nothing is
// started when the call's parent is not recording, so an unsampled call costs
// nothing.
//
// # Span attributes
//
//	key                                  type     unit  set by        on
//	deadlinekit.budget.received_ms       float64  ms    propagate     server span
//	deadlinekit.budget.source            string          propagate     server span
//	deadlinekit.budget.clamped           bool            propagate     server span
//	deadlinekit.budget.sent_ms           float64  ms    propagate     call span (first attempt's) and attempt span
//	deadlinekit.shortcircuit.rejected    bool            shortcircuit  server span
//	deadlinekit.shortcircuit.floor_ms    float64  ms    shortcircuit  server span
//	deadlinekit.shortcircuit.remaining_ms float64 ms    shortcircuit  server span
//	deadlinekit.shortcircuit.admission   string          shortcircuit  server span, behind a concurrency limit
//	deadlinekit.shortcircuit.queued      bool            shortcircuit  server span, behind a concurrency limit
//	deadlinekit.shortcircuit.queue_wait_ms float64 ms    shortcircuit  server span, behind a concurrency limit
//	deadlinekit.server.overrun_ms        float64  ms    shortcircuit  server span
//	deadlinekit.attempts                 int             retry, hedge  call span
//	deadlinekit.retry.count              int             retry         call span
//	deadlinekit.retry.stop_reason        string          retry         call span
//	deadlinekit.hedge.count              int             hedge         call span
//	deadlinekit.hedge.won                bool            hedge         call span
//	deadlinekit.hedge.skip               string          hedge         call span, when no hedge was sent
//	deadlinekit.attempt.number           int             retry, hedge  attempt span
//	deadlinekit.attempt.kind             string          retry, hedge  attempt span
//	deadlinekit.attempt.outcome          string          retry, hedge  attempt span
//	http.request.resend_count            int             retry, hedge  HTTP attempt span (OTel semconv)
//	previous-rpc-attempts                int             retry, hedge  gRPC attempt span (gRFC A72)
//
// Budget source values are the lower-case header names (grpc-timeout,
// connect-timeout-ms, x-envoy-expected-rq-timeout-ms) or "default". Stop reasons are
// the StopReason constants, skip reasons the HedgeSkip constants, attempt kinds and
// outcomes the AttemptKind and Outcome constants. deadlinekit.attempts counts every
// copy of the call that was sent: retries and hedges included.
//
// # Metrics
//
//	instrument                              kind       unit
//	deadlinekit.retry.retries               counter    {retry}
//	deadlinekit.retry.budget_refusals       counter    {refusal}
//	deadlinekit.hedge.sent                  counter    {hedge}
//	deadlinekit.hedge.wins                  counter    {hedge}
//	deadlinekit.shortcircuit.rejections     counter    {request}     by reason (below_floor, expired, cannot_finish, dropped, overloaded, canceled)
//	deadlinekit.shortcircuit.in_flight      updown     {request}     handlers running under a concurrency limit
//	deadlinekit.shortcircuit.queue_length   updown     {request}     requests waiting for a slot
//	deadlinekit.shortcircuit.limit          gauge      {request}     the current concurrency limit
//	deadlinekit.shortcircuit.queue_wait     histogram  s             time queued requests waited
//	deadlinekit.server.budget               histogram  s
//	deadlinekit.server.overrun              histogram  s
//	deadlinekit.breaker.state               gauge      {state}       per target: 0 closed, 1 half-open, 2 open
//	deadlinekit.breaker.transitions         counter    {transition}  per target and new state
//	deadlinekit.breaker.refused             counter    {call}        per target
//	deadlinekit.breaker.outcomes            counter    {call}        per target and outcome
//
// The toolkit's other instruments carry no attributes, so their cost does not grow
// with routes or methods; per-route detail is on the spans. The breaker's carry the
// target, whose number package breaker bounds. Its span attributes
// (deadlinekit.breaker.*, on the call's span when a call was refused or was a probe)
// and its state-change event are in breaker.go.
package otelattr
