// Package hedge sends a backup copy of a slow idempotent request and takes whichever
// answer comes first, so that one slow replica does not set the latency of the whole
// call, while never letting the backups add more than a fixed share of load.
//
// # When to hedge, and when not
//
// Hedging pays when latency has a long tail that is not caused by the request itself:
// a replica pausing for garbage collection, a cold cache, a noisy neighbour, a queue
// that happened to be long. A second copy, sent to whichever replica the load balancer
// picks next, usually answers in median time. It does not pay when every replica is
// slow (an overloaded backend: hedging only adds load, which is why the extra load is
// capped), when the request itself is slow wherever it runs (a big query), or when the
// call is not idempotent: both copies may land, and a hedged write is a duplicated
// write. Writes are hedged only when the caller sends an Idempotency-Key the server
// deduplicates on.
//
// # The delay
//
// A call is hedged once it has taken longer than the recent latency of its target at
// a percentile ([WithPercentile], default P99): per host for HTTP, per full method for
// gRPC. Latencies are kept in a sliding time window of log-linear histograms (30 s in
// 3 buckets of 10 s by default, [WithWindow]; an estimate is within about 3% of a
// latency actually seen). Only successful answers feed the window, so that fast
// failures do not drag the delay down, and so do primaries cut short because a hedge
// answered first (their time up to the cut is a lower bound of their latency). Until a
// target has [DefaultMinSamples] (100) latencies in its window ([WithMinSamples]),
// calls to it are not hedged at all, unless [WithInitialDelay] gives a delay to use
// meanwhile. The delay is kept within [WithMinDelay] (default 1 ms) and [WithMaxDelay]
// (default none).
//
// # The cap
//
// Hedges never exceed a share of the primary requests ([WithMaxExtraLoad], default
// 0.15). A token account enforces it: each primary deposits that share of a token,
// each hedge withdraws a whole one, and a hedge that finds less than a token is not
// sent. A new [Hedger] starts with [Burst] (10) tokens, which is also the most the
// account holds, so over any stretch of calls, hedges ≤ 0.15 × primaries + 10. When
// every request turns slow at once (a latency shift), the delay still reflects the
// old, faster latencies for a while and every call wants a hedge: the account runs dry
// and the hedge rate stays at the cap until the window has learned the new latencies.
// [WithMaxAttempts] (default 2: one primary, one hedge) bounds the copies of one call.
//
// # Idempotency
//
// Over HTTP, GET, HEAD, OPTIONS, TRACE, PUT and DELETE are hedged, and any request
// carrying an Idempotency-Key header; POST and PATCH without a key are sent once,
// unchanged. A request with a body is hedged only when the body can be replayed
// (http.Request.GetBody, which http.NewRequest sets for in-memory bodies); every
// attempt gets a body of its own. The caller's request is never modified. Over gRPC,
// a method is hedged when [WithIdempotentMethods] names it, or when its descriptor in
// the protobuf registry (protoregistry.GlobalFiles, filled by the generated code)
// declares idempotency_level NO_SIDE_EFFECTS or IDEMPOTENT, or when the call's
// outgoing metadata carries an idempotency-key; other methods are sent once.
//
// # Deadlines and errors
//
// No hedge is sent when the call has less than [WithFloor] (default 20 ms) left before
// its deadline: a copy with no time to run only adds load.
//
// The first answer wins, whichever copy gives it; a failure ends the call only when
// no other copy is left. An answer is a success (an HTTP status below 400, gRPC OK) or
// the server's verdict on the request itself, which any copy would get (another 4xx;
// gRPC INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED,
// UNAUTHENTICATED, FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED, ABORTED). A
// failure is what one copy met and another may not: a transport error, a 5xx, 408 or
// 429, any other gRPC code. So a hedge that fails fast never cuts a healthy primary
// short, and a primary that fails while its hedge is out waits for the hedge. When
// every copy has failed, the call returns the failure that came last. The copies
// still running when the call is decided are cancelled, and the response bodies of
// HTTP losers are drained (at most 64 KiB, at most 100 ms) and closed, so that their
// connections are reused or released.
//
// A failure with a non-fatal status (default HTTP 503 or a connection refused, gRPC
// UNAVAILABLE; [WithNonFatalHTTPStatus], [WithNonFatalCodes]) also fires the next
// hedge at once, as in gRPC's hedging design (A6).
//
// A hedge refused for lack of budget is non-fatal for that copy and sends no further
// hedge (the next would have even less time): the primary decides the call. A
// refusal is a failure whose answer carries grpc-retry-pushback-ms with a negative
// value (the toolkit's servers answer 504 / DEADLINE_EXCEEDED with -1 when their
// floor refuses a request; an HTTP header, a gRPC trailer), or a refusal before
// sending: an error matching deadline.ErrInsufficientBudget (propagate's floor,
// beneath). A hedge whose body cannot be replayed (GetBody fails) is never sent: it
// is not counted as a hedge, its token goes back to the account, and it sends no
// further hedge.
//
// A hedge wins only with a success: when every copy failed, no win is counted and
// deadlinekit.hedge.won is false. Every hedge carries grpc-previous-rpc-attempts (an
// HTTP header, gRPC metadata) so that the server can tell it is a copy; beneath a
// retry layer that already wrote one, the hedge adds to its count.
//
// Over gRPC, the caller's grpc.OnFinish callbacks run once per call, with the call's
// result: no copy carries them. The header, trailer and peer asked for with
// grpc.Header, grpc.Trailer and grpc.Peer are the winner's. The other call options
// of grpc-go (credentials, codec, compressor, message sizes, wait-for-ready,
// authority, MaxRetryRPCBufferSize, StaticMethod) configure each copy and report
// nothing back, so every copy carries them.
//
// # Where it sits
//
// On the client, beneath retry and the breaker, above propagate (the breaker above
// counts the copies of one call as one outcome):
//
//	user's tracing → retry → breaker → hedge → propagate → transport
//
// propagate, beneath, writes into every attempt the time left at the moment that
// attempt is sent; hedge itself never writes grpc-timeout:
//
//	client := &http.Client{Transport: hedge.NewTransport(propagate.NewTransport(nil))}
//
//	grpc.NewClient(target, grpc.WithChainUnaryInterceptor(
//		hedge.UnaryClientInterceptor(),
//		propagate.UnaryClientInterceptor(),
//	), ...)
//
// The base transport (or the rest of the gRPC chain) must honour the context of each
// request: losers are stopped by cancelling it.
//
// # State and statistics
//
// The delay estimates, the token account and the statistics belong to a [Hedger].
// [NewTransport] and [UnaryClientInterceptor] each make one of their own; make one
// with [New] to share it between adapters and to read [Hedger.Stats] (primaries,
// hedges sent, hedge wins, hedges refused by the cap or the deadline, calls not
// hedged because not idempotent) and [Hedger.Delay] (the current delay of a target).
// With an OpenTelemetry SDK installed, package otelattr records each call: the
// layer joins the call's span ([otelattr.StartCall]: the one a layer above started,
// or the user's client span made for the call) or starts one; each attempt of a
// hedgeable call gets a child span (number, kind primary or hedge, outcome success,
// failure or cancelled; an HTTP attempt carries its own trace context), ended before
// the call's: when the call is decided, the copies still in flight end "canceled"
// at once. On the call's span, the hedges sent and whether a hedge won, or, when none
// was sent, why not (deadlinekit.hedge.skip: not_idempotent, warming_up, cap,
// deadline, not_due, disabled), so that a slow unhedged call is explained; the
// counters deadlinekit.hedge.sent and deadlinekit.hedge.wins. [WithObserver]
// receives one [Event] per call with its attempt count, for anything else; unset, it
// costs nothing.
//
// No goroutine runs between calls. Within a call, the primary runs on the caller's
// goroutine, so a call that answers before the delay starts none; each hedge runs
// on a goroutine of its own, which ends when its attempt returns (at once, once
// cancelled) or, for an HTTP loser that had an answer, once its body is drained. A
// panic in an attempt of a hedged call is returned as the attempt's error.
package hedge
