// Package deadlinekit makes one request's time budget travel with it through every hop
// of a service chain, and spends it wisely: downstream work stops when the caller has
// given up, a server refuses work it cannot finish in time, slow calls are hedged,
// failures are retried only where a retry can help, dead downstreams are cut off, and
// every attempt shows in traces.
//
// This package is the stack: one constructor per side and protocol, assembling the
// layers (packages propagate, shortcircuit, retry, breaker, hedge) in this order,
// outermost first, with defaults chosen together:
//
//	server: user's tracing → propagate → retry (server side) → shortcircuit → [dedup] → handler
//	client: user's tracing → retry → breaker → hedge → propagate → transport
//
//	srv := &http.Server{Handler: deadlinekit.NewHandler(mux)}           // HTTP server
//	client := &http.Client{Transport: deadlinekit.NewTransport(nil)}     // HTTP client
//	gs := grpc.NewServer(deadlinekit.ServerOptions()...)                 // gRPC server
//	conn, err := grpc.NewClient(target, append(deadlinekit.DialOptions(), // gRPC client
//		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
//
// One floor ([WithFloor]) and one reserve ([WithReserve]) set every layer's
// thresholds, so that no layer sends what the next would refuse; each layer's own
// options pass through [WithPropagate], [WithShortCircuit], [WithRetry], [WithBreaker]
// and [WithHedge], and [Without] leaves a layer out. [WithDedup] adds the server
// half of idempotency keys (package dedup): off without a store. [WithCriticality]
// sets each request's level (package criticality) at the edge, from the request;
// propagate carries it to every call made while serving it, and a server reads it
// only from callers it trusts ([WithEdge]: none). Each outbound call has one span
// carrying its totals, with one child span per attempt (package otelattr names what
// they hold). A handler relays a downstream's failure with [FromHTTP] or [FromGRPC]
// and [WriteHTTPError] or [GRPCError], which keep four signals apart on the wire, one
// value each: "do not retry", "come back in N", "the handler did not run" (a write
// may be sent again), and "the failure is my downstream's" (the caller's breaker
// counts it as neutral); [Public] gives an edge's end users a stable reason instead
// of the chain. The runnable demonstration is examples/threehop.
//
// What travels between services (gRPC: metadata of the same name in lower case):
//
//	grpc-timeout, Connect-Timeout-Ms  the budget left (package propagate)
//	deadlinekit-criticality           the request's level; nothing for critical (packages criticality, propagate)
//	grpc-previous-rpc-attempts        on every retry and hedge: the attempt's number
//	deadlinekit-hedged-above          a hop above may hedge this call (package hedge)
//	Idempotency-Key                   a write's key, the same on every attempt (packages retry, dedup)
//	grpc-retry-pushback-ms, Retry-After, deadlinekit-unprocessed, deadlinekit-relayed
//	                                  on answers: the signals of a failure ([WriteHTTPError])
//
// An edge ([WithEdge]) never reads the level its callers send, and sends none of the
// deadlinekit-* headers back.
package deadlinekit
