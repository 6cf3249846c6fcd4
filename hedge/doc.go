// Package hedge sends a backup copy of a slow idempotent request and takes whichever
// answer comes first, so that one slow replica does not set the latency of the call,
// while the backups never add more than a fixed share of load.
//
// A call is hedged once it has taken longer than the recent latency of its target at a
// percentile ([WithPercentile], default P99; see [Delay]) or at the quantile that
// spends a stated share of extra load ([WithExtraLoad]), and hedges stay within a
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
//
// # The chain rule
//
// In a chain where every hop hedges, the hedges multiply: a hop that is slow makes
// its caller hedge it, and the caller's caller, and each copy's subtree hedges again
// (each layer's 15% cap holds for its own calls, and 1.15³ ≈ 1.52 over three hops).
// A hedge sent because its parent is slow cannot help. So, as retries are made in
// one layer only, a call is hedged by the hop nearest the user that may hedge it, and
// by nobody below:
//
//   - a call the layer may hedge (idempotent, replayable, hedging on) carries the
//     header deadlinekit-hedged-above: 1 (gRPC metadata of the same name), and so
//     does every call a handler makes while serving such a request;
//   - a server (package propagate's server side: deadlinekit.NewHandler,
//     ServerOptions, connectkit.HandlerOption) marks the context of a request that
//     carries it, or that is a retry's copy (grpc-previous-rpc-attempts ≥ 1 without
//     the header), and the calls made under that context are sent once (span
//     attribute deadlinekit.hedge.skip = "covered", [Stats].Covered), with the
//     header;
//   - the last copy a layer may send (the hedge, with the default of two copies)
//     of a call but a keyed write (see Keyed writes below) carries
//     deadlinekit-hedged-above: 0 instead: nothing above will send it again,
//     so the hops below may hedge in its subtree. A stall that hits the primary and
//     then the hedge is still hedged once, below, and the P99.9 keeps the benefit of
//     more than one hedging layer without their product.
//
// A copy of the call at the top runs the whole subtree again, so the subtree's
// slowness is still hedged: the extra load at the bottom of the chain is about the
// top hedger's, within its cap, instead of the product of every hop's. A call the
// top does not hedge (a write without an idempotency key; a keyed write, by
// default) carries no header, and the hops below it hedge their own calls as before. [WithoutChainRule] turns the rule
// off, for measuring it (BENCHMARKS.md has the figures).
//
// # Keyed writes
//
// A write with an idempotency key (an Idempotency-Key header, idempotency-key
// metadata: the caller's, or one package retry derived from the key of the request
// being served) is not hedged by default ([Stats].KeyedWrites, span attribute
// deadlinekit.hedge.skip = "keyed_write"). Its copy would carry the same key, and a
// server that deduplicates (package dedup) runs the first copy to arrive: a copy
// that comes while the first runs waits for the first's answer, so a hedge of a
// slow write buys nothing and costs a request. It pays only when the first copy is
// lost on its way (a connection that died, a replica that never answers), where the
// call would otherwise wait for its deadline or its retry. In BenchmarkKeyedWriteHedge
// (BENCHMARKS.md), against dedup on loopback: a 50 ms write took 52.3 ms sent once
// and 53.3 ms hedged, for twice the requests; one whose first copy was lost took
// 126.8 ms (its retry after 100 ms) and 14.2 ms hedged.
//
// [WithKeyedWrites] hedges them. Every copy of a keyed write then carries
// deadlinekit-hedged-above: 1, the last one included, so that no hop beneath hedges
// its subtree again: a keyed write reaches the bottom of a chain at most as many
// times as the layer nearest the user sends copies of it (two, by default), instead
// of that number times one more per hedging hop.
//
// A copy of a hedged keyed call that arrives while another copy runs, and cannot
// wait for its answer, is answered 409 (gRPC ABORTED) with a positive pushback; the
// layer reads that as the copy refused, never the call's answer: the copy that runs
// brings it. (A 409 or ABORTED without a pushback is the application's conflict, an
// answer as before.) Over gRPC the primary's trailer is read from the caller's
// grpc.Trailer option, or one the layer adds to a keyed call. The same holds for a
// keyed call of an idempotent method, which is hedged without the option.
//
// # Choosing the percentile
//
// A hedge after P99 helps when fewer than 1% of calls are slow. When more are (3% of
// calls stalling on a CPU stall, a garbage collection, a cold cache), the P99 is the
// stall itself: the hedge goes out when the stall is over, and does nothing but add
// load. Hedge below the share of slow calls instead: with 3–5% slow, WithPercentile(0.9)
// (or 0.95 once below 5%); or a fixed delay a little above the normal latency,
// WithDelay(Delay{Initial: d, Min: d, Max: d, MinSamples: 1 << 30}). The cap
// ([WithMaxExtraLoad]) still bounds the cost.
//
// The stall is not reached at once, though. A primary cut short by its hedge's
// answer tells only that it took longer than its cut, and counts as that (as
// Finagle's backup requests count it). While more calls are slow than the
// percentile's share, the delay therefore climbs from below the slow calls by about
// a hedge's latency per window: in the meantime every slow call is hedged, and the
// hedges spend the slow calls' share, not the percentile's, up to the cap. With
// 1.5% of calls stalling for 300 ms, the P99 delay went from 32 to 41 ms over 30 s,
// at 1.6% of extra load, and would have taken minutes more to reach the stall. The
// same holds after a cold start whose first latencies miss the slow calls. A cap
// of twice the percentile's share (WithMaxExtraLoad(0.02) for the P99) bounds that
// cost from the start: beyond it the slow calls go unhedged, their full latencies
// teach the window the tail, and the delay soon reaches the stall, after which
// the stall is no longer hedged at all.
//
// A percentile is a share of extra load: a hedge after P99 costs 1% more requests,
// and the P99.9 it buys is about the delay plus a normal latency. [WithExtraLoad]
// names that share instead (WithExtraLoad(0.05): the delay after which 5% of calls
// are hedged), bounded by the cap. On a heavy tail, spending more shortens the tail:
// BENCHMARKS.md measures 1.5% and 5% against the P99 and against fixed delays at the
// true quantiles.
//
// # What it reports
//
// Each call's span carries the hedges it sent and whether one won, or why none
// was sent. The metric deadlinekit.hedge.outcomes counts, per target, each hedge
// sent once its call ends: won (its success was the call's answer) or wasted (the
// primary or another copy answered, or none succeeded); their sum is the hedges
// sent. [Hedger.Stats] has the same totals for a whole Hedger, [Hedger.Delays] the
// current delay of each target.
package hedge
