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
// # Attempts as child spans
//
// A call that may take several attempts (package retry, package hedge) gets one child
// span per attempt, in the style of gRFC A72: the call's span (the user's client span)
// carries the totals, each attempt span carries its number, its kind (primary, retry,
// hedge), its outcome and the budget it was sent with, and the downstream server's span
// is a child of the attempt that reached it. In Jaeger, a hedged call shows as two
// overlapping attempt spans under the call, the loser ending "cancelled". Attempt spans
// are made only when the call's span is recording, so an unsampled call costs nothing.
// Layers stacked on one call share attempts: with hedging under retry, the hedging
// layer's primary is the retry layer's attempt (no span of its own), and its hedges
// are children of that attempt span, so a call answered at once has one attempt span
// however many layers it went through.
//
// # Span attributes
//
//	key                                  type     unit  set by        on
//	deadlinekit.budget.received_ms       float64  ms    propagate     server span
//	deadlinekit.budget.source            string          propagate     server span
//	deadlinekit.budget.clamped           bool            propagate     server span
//	deadlinekit.budget.sent_ms           float64  ms    propagate     client span or attempt span
//	deadlinekit.shortcircuit.rejected    bool            shortcircuit  server span
//	deadlinekit.shortcircuit.floor_ms    float64  ms    shortcircuit  server span
//	deadlinekit.shortcircuit.remaining_ms float64 ms    shortcircuit  server span
//	deadlinekit.overrun_ms               float64  ms    shortcircuit  server span
//	deadlinekit.attempts                 int             retry, hedge  call span
//	deadlinekit.retry.count              int             retry         call span
//	deadlinekit.retry.stop_reason        string          retry         call span
//	deadlinekit.hedge.count              int             hedge         call span
//	deadlinekit.hedge.won                bool            hedge         call span
//	deadlinekit.attempt.number           int             retry, hedge  attempt span
//	deadlinekit.attempt.kind             string          retry, hedge  attempt span
//	deadlinekit.attempt.outcome          string          retry, hedge  attempt span
//	http.request.resend_count            int             retry, hedge  HTTP attempt span (OTel semconv)
//	previous-rpc-attempts                int             retry, hedge  gRPC attempt span (gRFC A72)
//
// Budget source values are the lower-case header names (grpc-timeout,
// connect-timeout-ms, x-envoy-expected-rq-timeout-ms) or "default". Stop reasons are
// the StopReason constants; attempt kinds and outcomes the AttemptKind and Outcome
// constants.
//
// # Metrics
//
//	instrument                              kind       unit
//	deadlinekit.retry.retries               counter    {retry}
//	deadlinekit.retry.budget_refusals       counter    {refusal}
//	deadlinekit.hedge.sent                  counter    {hedge}
//	deadlinekit.hedge.wins                  counter    {hedge}
//	deadlinekit.shortcircuit.rejections     counter    {request}
//	deadlinekit.server.budget               histogram  s
//	deadlinekit.server.overrun              histogram  s
//
// Metric instruments carry no attributes, so their cost does not grow with routes or
// methods; per-route detail is on the spans.
package otelattr
