// Package breaker is a circuit breaker per downstream target that knows the
// caller's deadline: it tells a downstream that fails from a caller that gave it
// too little time, and only the first opens the circuit.
//
// Each target (HTTP: scheme, host and port; gRPC: the ClientConn's target; or a key
// of your own, [WithKey]) has a circuit, made on first use, at most [MaxTargets].
// A circuit is closed: calls go through, and their outcomes are counted in a sliding
// window (10 buckets of 1 s). It opens when 20 counted calls in a row failed
// ([WithConsecutiveFailures]), or when the window holds at least 20 counted calls
// ([WithMinCalls]) and more than 60% of them failed ([WithFailureRatio]), or more
// than a chosen share were slower than a threshold ([WithSlowCall]). Open, it fails
// calls at once with [ErrOpen]: nothing is sent. After a sleep (5 s, [WithOpenFor]),
// it is half-open: 3 probes go through ([WithProbes]); if they all succeed it
// closes, if one fails it opens again for a longer sleep (doubling, with jitter, up
// to 300 s: [Sleep]).
//
// What a call says of its target is decided with its deadline ([Classify], or your
// own [WithClassifier]): connection errors, 502, 503, UNAVAILABLE and a timeout of a
// call that had a fair budget are failures; any answer of a working server (4xx,
// NOT_FOUND, INVALID_ARGUMENT…) is a success; and neutral, counted neither way: the
// caller cancelling, a timeout of a call whose budget was below the target's
// recent median latency, a downstream guard's refusal for lack of budget
// (grpc-retry-pushback-ms -1 with 504 or DEADLINE_EXCEEDED), a refusal before
// sending ([deadline.ErrInsufficientBudget]). Hundreds of impatient callers
// therefore never open the circuit of a healthy downstream.
//
// Use it on the client side, below the retry layer and above hedging:
//
//	b := breaker.New()
//	client := &http.Client{Transport: b.Transport(nil)}
//	conn, err := grpc.NewClient(addr,
//		grpc.WithChainUnaryInterceptor(b.UnaryClientInterceptor()),
//		grpc.WithChainStreamInterceptor(b.StreamClientInterceptor()))
//
// A refused HTTP request returns an error matching [ErrOpen] (find the
// [*OpenError] with [IsOpen]) and no response; a refused gRPC call fails with
// UNAVAILABLE and grpc-retry-pushback-ms set to the time until the next probe. Both
// carry that time on the error, so that package retry above retries only when the
// probe comes before its deadline, and otherwise stops at once, spending no token.
//
// The closed path takes no lock for a call that succeeds, reads the clock twice and
// does not allocate. A Breaker starts no goroutine: a circuit
// changes state on the goroutine of the call that finds the change due (a gRPC
// stream's outcome, when its caller's context ends first, is counted on the
// goroutine context.AfterFunc starts). Telemetry (package otelattr): the state and
// "refused" or "probe" on the call's span, an event on state changes, and the
// metrics deadlinekit.breaker.state, .transitions, .refused and .outcomes.
package breaker
