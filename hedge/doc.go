// Package hedge sends a backup copy of a slow idempotent request and takes whichever
// answer comes first, so that one slow replica does not set the latency of the call,
// while the backups never add more than a fixed share of load.
//
// A call is hedged once it has taken longer than the recent latency of its target at a
// percentile ([WithPercentile], default P99; see [Delay]), and hedges stay within a
// share of the calls ([WithMaxExtraLoad], default 15%). Put the adapter on the client
// beneath retry and the breaker, above propagate, which writes into every attempt the
// time left when that attempt is sent:
//
//	client := &http.Client{Transport: hedge.NewTransport(propagate.NewTransport(nil))}
//
//	grpc.NewClient(target, grpc.WithChainUnaryInterceptor(
//		hedge.UnaryClientInterceptor(),
//		propagate.UnaryClientInterceptor(),
//	), ...)
//
// To share the latencies, the cap and the statistics between adapters, make one
// [Hedger] with [New].
package hedge
