// Package deadlinekit makes one request's time budget travel with it through every hop
// of a service chain, and spends it wisely: downstream work stops when the caller has
// given up, a server refuses work it cannot finish in time, slow calls are hedged,
// failures are retried only where a retry can help, and every attempt shows in traces.
//
// This package is the stack: one constructor per side and protocol, assembling the
// layers in the documented order with defaults chosen together.
//
//	mux := http.NewServeMux()
//	srv := &http.Server{Handler: deadlinekit.NewHandler(mux)}           // HTTP server
//	client := &http.Client{Transport: deadlinekit.NewTransport(nil)}     // HTTP client
//	gs := grpc.NewServer(deadlinekit.ServerOptions()...)                 // gRPC server
//	conn, err := grpc.NewClient(target, append(deadlinekit.DialOptions(), // gRPC client
//		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
//
// # The order, outermost first
//
//	server: user's tracing → propagate → retry (server side) → shortcircuit → handler
//	client: user's tracing → retry → breaker → hedge → propagate → transport
//
// propagate reads the caller's budget (grpc-timeout, Connect-Timeout-Ms, Envoy's
// header when trusted), clamps it and sets it on the context; on the client it writes
// the time left when each attempt is sent, minus a reserve. shortcircuit refuses a
// request whose budget is below the floor, with "do not retry"
// (grpc-retry-pushback-ms: -1). retry retries only what can succeed, inside the one
// deadline, under a retry budget, in one layer only. breaker keeps a circuit per
// target and refuses calls to a dead one at once, counting neither the caller's
// cancellations nor timeouts it caused by giving too little time. hedge sends a backup
// copy of an idempotent call that runs past the observed P99, the extra load capped
// at 15%.
//
// One floor ([WithFloor], 20 ms) and one reserve ([WithReserve], 5 ms) set every
// layer's thresholds, so that no layer sends what the next would refuse. Each layer's
// own options pass through [WithPropagate], [WithShortCircuit], [WithRetry],
// [WithBreaker] and [WithHedge]; [Without] leaves a layer out. To change the order, nest the packages'
// adapters by hand: they have the same names in every package (NewTransport,
// NewMiddleware, UnaryClientInterceptor, ...).
//
// # Tracing
//
// Each outbound call has one span of its own, carrying the call's totals (attempts,
// retries, hedges, whether a hedge won, why it stopped, the budget sent): the client
// span of otelhttp's transport or grpc-go's OpenTelemetry plugin when they are
// outermost, else a client span the toolkit starts. Each attempt is a child span of
// it, and the downstream's server span hangs under the attempt that reached it. No
// server span carries a call's totals. See package otelattr for the vocabulary.
//
// The runnable demonstration is examples/threehop: go run ./examples/threehop.
package deadlinekit
