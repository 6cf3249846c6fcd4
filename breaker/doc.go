// Package breaker is a circuit breaker per downstream target that knows the
// caller's deadline: it tells a downstream that fails from a caller that gave it too
// little time, and only the first opens the circuit ([Classify]).
//
// A circuit opens on a run of failures or a failure (or slow-call) ratio in a sliding
// window; open, it refuses calls at once with [ErrOpen], nothing sent; after a sleep
// that grows with each failed probe ([Sleep]), a few probes go through and close it
// again (a probe that timed out is lost, not failed: [MaxLostProbes] of them re-open
// it for the same sleep). Use it on the client side, below the retry layer and above hedging, with a
// [Breaker] shared by the adapters that should share circuits:
//
//	b := breaker.New()
//	client := &http.Client{Transport: b.Transport(nil)}
//	conn, err := grpc.NewClient(addr,
//		grpc.WithChainUnaryInterceptor(b.UnaryClientInterceptor()),
//		grpc.WithChainStreamInterceptor(b.StreamClientInterceptor()))
//
// A gRPC client of a service with several replicas gives each replica (endpoint) a
// circuit of its own with the [BalancerName] policy (grpc.WithDefaultServiceConfig
// with [ServiceConfig]): an open replica is skipped while the others serve, and the
// call is refused only when every replica's circuit is open.
//
// A target that is up but refuses for load (429, 503 with Retry-After,
// RESOURCE_EXHAUSTED) opens no circuit: [Classify] counts none of those as a
// failure. Nor does one that is up and shedding while it lets calls wait past
// their deadline (an overloaded server that serves its critical calls, or refuses
// some calls, while its sheddable ones time out in its queue): a timeout is not a
// failure when, while it ran, the target refused another call through the circuit
// for load (or for lack of budget a call that had at least its typical latency) or
// served one of a higher level of criticality ([Result.SheddingSince]),
// so the circuit does not refuse the calls the target still serves. A target that
// answers nothing (blackholed: every call times out; or refusing connections), or
// hangs most calls and answers some at the same level, opens it as before: after
// [DefaultConsecutiveFailures] calls, or on the ratio.
//
// A target that is up but refuses for load is sent less by the circuit's soft mode,
// the adaptive throttle, on by default ([WithAdaptiveThrottling], [DefaultThrottle]):
// the SRE book's client-side throttle, per circuit and per level of criticality
// (package criticality), refuses a call locally with probability
// max(0, (requests − K·accepts) / (requests + 1)) over a window ([Throttle]), with
// [ErrThrottled]; a sheddable call is throttled before a critical one, and a target
// that does not answer at all still opens the circuit. Offered 10 times its
// capacity, a server whose refusals cost a tenth of a request spends under 10% of
// its work on them (all of it without the throttle), and a caller that sends it a
// few calls a second or more is let through again within a third of the window
// once it accepts again. A target that accepts at least half of what it is sent
// (1/K) is never throttled, and its calls take no lock for the throttle. Nothing is
// throttled before the window holds [Throttle.MinRequests] requests of the level
// (10): a fresh caller's retry after a refusal for load is sent. Turn it off with
// [WithoutAdaptiveThrottling]:
//
//	b := breaker.New(breaker.WithoutAdaptiveThrottling())
//	opt := deadlinekit.WithBreaker(breaker.WithoutAdaptiveThrottling()) // the stack's
//
// A refusal carries the time until the next probe (gRPC: UNAVAILABLE with
// grpc-retry-pushback-ms), so that package retry above retries only when the probe
// comes before its deadline. Only as many refused calls per opening as there are
// probes are told to come back for them; the rest are told the probes are taken
// (pushback -1) and return at once, their budget left for the caller's next move,
// instead of all waiting for the probes and all but the probes being refused again.
//
// Two rules hold for every layer. Every refusal, at any layer, for a unary call or a
// stream, ends every span and context that the layers beneath it started, and sends
// nothing. No pooled or reused object crosses a layer boundary while the call may
// still run: what the breaker hands the layer beneath (a gRPC call's options) is a
// call's own, since a hedge beneath may still be starting as the call returns.
//
// A stream is counted when it ends, except a half-open probe: it is judged at its
// first answer, so that a long-lived watch closes the circuit as soon as it answers.
package breaker
