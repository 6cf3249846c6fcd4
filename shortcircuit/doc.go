// Package shortcircuit is the server guard of deadlinekit: it refuses a request
// before the handler runs when the time the request has left cannot pay for the
// work, and it measures the work that handlers waste past their deadline.
//
// A request that arrives with 5 ms left for a handler that needs 20 ms should cost the
// server microseconds, not 20 ms of work whose answer nobody will read. The guard
// compares the time left on the request's context with a floor (the least time the
// handler needs) and, when less is left, answers at once: gRPC DeadlineExceeded or
// HTTP 504, with a message that states both numbers:
//
//	shortcircuit: 4.2ms left, floor 20ms: request refused before the handler ran
//
// A request whose deadline has already passed is always refused ("deadlinekit:
// deadline passed 3ms ago: request refused before the handler ran"), whatever the
// floor. A request without a deadline is never refused: the guard has nothing to
// compare.
//
// # Where it sits
//
// The guard reads the deadline from the request's context, so it runs after whatever
// puts the deadline there and right before the handler:
//
//	user's tracing (otelhttp, otelgrpc) → propagate → shortcircuit → handler
//
// gRPC servers set the context deadline from the grpc-timeout header themselves; an
// HTTP server needs package propagate's middleware (or its own) in front of the guard.
// The entry points are [NewMiddleware] for net/http and [UnaryServerInterceptor] and
// [StreamServerInterceptor] for grpc-go. Each call builds an independent guard with
// its own adaptive state.
//
// # Floors
//
// The floor in force for a request is the largest of the floors configured:
//
//   - a static floor for every request, [WithFloor];
//   - a floor per route or per gRPC method, [WithFloorFunc], a function of the route
//     key: the gRPC full method ("/package.Service/Method") or, for HTTP, the
//     request's Pattern when a Go 1.22+ [http.ServeMux] has matched it, else its URL
//     path. A ServeMux sets Pattern when it dispatches, so to key on the pattern wrap
//     each handler you register (mux.Handle("GET /items/{id}", guard(h))), not the mux
//     itself;
//   - an adaptive floor learned from the handler's own durations, [WithAdaptiveFloor].
//
// With no option the floor is zero: the guard refuses only requests that arrive
// already past their deadline, and still measures overrun for the observers.
//
// # Adaptive floor
//
// The adaptive floor of a route is a quantile (default the median) of the durations
// of the route's recent successful calls: gRPC calls whose handler returned a nil
// error, HTTP responses with a status below 500. Durations are kept in a sliding
// window (default 10 s in 10 buckets) per route, and the floor applies only once the
// window holds at least MinSamples durations (default 20); it is then held between
// Min and Max ([DefaultAdaptive] gives the defaults). Requests without a deadline and
// requests admitted with a low budget teach it as well as any other. For a stream,
// the duration is the whole stream's. The floor is read without a lock on the admit
// path; learning happens after the handler has returned.
//
// When the handler gets slower, the floor rises as slow durations replace fast ones
// in the window: with the median, it reaches the new speed as soon as slow calls are
// more than half of those in the window, after half a window when the call rate has
// not changed, and in any case once the last fast call has left the window, one
// window (10 s by default) after the change. When the handler gets faster, the floor
// falls the same way, and usually sooner, since a fast handler fills the window at a
// higher rate: at 100 calls per second, a route that went from 100 ms to 10 ms has
// its floor back within a second. A higher
// quantile (0.9) follows a slowdown sooner (10% slow calls suffice) and a speed-up
// later. A route whose window empties (no successful call for a whole window, for
// instance because the floor itself refused everything) drops below MinSamples and
// loses its adaptive floor until it has learned again, so the guard cannot lock a
// route out for good. Max bounds the damage of a handler that turns very slow: the
// guard never refuses a request that has Max or more left because of the adaptive
// floor.
//
// # Overrun
//
// For each admitted request the guard measures how long the handler kept running
// after the request's deadline had passed: the work nobody was waiting for. It reports
// it, with the decision, the time left, the floor and the handler's duration, as an
// [Event] to the [Observer]s given with [WithObserver]. [Counter] is an observer that
// keeps totals (admitted, refused, overruns) for a [Stats] snapshot; package otelattr
// records the same events on spans. With static and per-route floors the admit path
// does not allocate, observers or not; with an adaptive floor gRPC does not either,
// and HTTP makes one allocation (the writer that notes the status). The deadline the
// overrun is measured against is the one on the handler's context: for gRPC the
// server's own (arrival + grpc-timeout), a little after the client's.
//
// # Concurrency limit and admission
//
// [WithMaxConcurrency] caps the handlers running at once; [WithAdaptiveConcurrency]
// lets the cap follow the handler's latency ([AdaptiveLimit]). A request beyond the
// cap waits in a bounded queue ([WithQueue]) and is admitted only if it can finish in
// time: on arrival, when the predicted wait (the requests ahead of it, the limit,
// the handler's recent service time) plus the service time exceeds its time left, it
// is refused at once ([CannotFinish]); in the queue, it leaves, refused, as soon as
// what is left can no longer pay for the service time ([Dropped]): it is never left
// to time out waiting. Both are refusals for lack of time (504 / DeadlineExceeded,
// "do not retry"). A full queue refuses as [Overloaded] (503 with Retry-After, or
// ResourceExhausted with RetryInfo, and grpc-retry-pushback-ms: the predicted wait),
// which package retry honours. A request without a deadline is never refused for
// its budget; it waits, and is refused only by a full queue. The limit is per guard:
// one per [NewMiddleware] or interceptor call, shared by its routes.
//
// # Mid-handler checks
//
// [Check] is for use inside a handler, before an expensive step: it returns a
// [*BudgetError] (matching [ErrInsufficientBudget] and [context.DeadlineExceeded]
// under [errors.Is]) when less than the step needs is left. The gRPC interceptors map
// such an error returned by a handler to DeadlineExceeded.
//
// # Errors on the wire
//
//	condition                                gRPC               HTTP
//	deadline passed, or time left < floor    DeadlineExceeded   504 Gateway Timeout
//	cannot finish in time (limit, queue)     DeadlineExceeded   504 Gateway Timeout
//	queue full                               ResourceExhausted  503 Service Unavailable
//	caller cancelled while queued            Canceled           499
//	handler returned a *BudgetError          DeadlineExceeded   (the handler writes its own response)
//
// Each refusal for lack of budget, and the DeadlineExceeded a *BudgetError is mapped
// to, carries grpc-retry-pushback-ms: -1 (a gRPC trailer, an HTTP response header):
// "do not retry". A retry could only arrive with less time than the refused request
// had, so neither deadlinekit's retry layers (package retry records the stop reason
// refused) nor grpc-go's own retry policy retry it, and the caller gets the refusal's
// words.
//
// A handler's own panic propagates through the guard unchanged.
package shortcircuit
