// Package chaintest holds the toolkit's chain and whole-stack tests: chains of
// separate loopback servers (HTTP, gRPC and connect mixed, up to four hops), and
// the whole stack between one client and one server, each built as a user builds
// it from the README, with the root constructors
// (deadlinekit.NewHandler, NewTransport, ServerOptions, DialOptions, connectkit's
// HandlerOption) and the one-line relays (FromHTTP, FromGRPC, GRPCError,
// WriteHTTPError). It has no code of its own: its tests are black-box, in package
// chaintest_test, and use the public API only (plus internal/testkit's test
// support: a server that cuts connections, a closed port, span attributes).
//
// What each file tests:
//
//   - stack_test.go: the whole stack on client → A (HTTP) → B (gRPC) → C (HTTP):
//     budgets decrease hop by hop, a refusal is not retried, the layer nearest a
//     failure absorbs it, an outage is not amplified; the breaker under load
//     (the flood stopped, probes only), shared breakers and hedgers, an open
//     circuit and an unfitting pushback relayed, overload that opens no circuit.
//   - relay_test.go, overload_relay_test.go: a write through gateway → orders →
//     inventory runs once at every hop; an UNAVAILABLE answer is not resent, a
//     guard's refusal is; an overloaded downstream reaches the user as an
//     overload, and a relayed failure keeps the gateway's circuit closed.
//   - breaker_test.go: user → gateway → two payments replicas → ledger, a breaker
//     per hop: a store down, a relayed timeout or a pushback opens no circuit
//     above; one replica down opens that replica's circuit only.
//   - admission_test.go: the adaptive concurrency limit in a chain under an open
//     loop at four times the capacity: no write runs twice, a refusal's "do not
//     retry" reaches every layer above.
//   - floors_test.go: learned floors do not compound down a 4-hop chain; a slow
//     hop still refuses what it cannot finish. BenchmarkChainLeastBudget.
//   - hedge_test.go, hedge_keyed_test.go, hedge_dedup_test.go: the chain rule
//     (only the hedge nearest the user is sent), keyed writes hedged once, and a
//     hedged copy refused by dedup (409, Aborted) is not the call's answer.
//     BenchmarkHedgeChain.
//   - dedup_test.go, dedup_work_test.go, dedup_lease_test.go: a lost answer
//     replayed to the retry; replays and waiting repeats teach no floor, hold no
//     slot and are admitted again when they take a key over; a replay carries the
//     first answer's "do not retry"; "come back" is not final; a repeat is refused
//     inside its own budget.
//   - keys_test.go, passkeys_test.go: idempotency keys travel down a chain (derived
//     per write, the same after a crash, per tenant, off when asked), also through
//     a gateway without dedup.
//   - edge_test.go: an edge gateway in front of a gRPC hop answers a reused key
//     422 and a malformed or doubled key 400, before anything runs.
//   - sent_test.go: a POST cut while its body was being sent is not resent.
//   - trace_test.go, trace_layers_test.go, trace_threehop_test.go,
//     trace_cancel_test.go, callspan_test.go, stream_test.go: where spans and the
//     toolkit's attributes land under otelhttp, otelgrpc and grpc-go's plugin:
//     one call span with its attempts beneath, one trace across hops, a cancelled
//     or losing attempt no error, the call's totals however its body ends.
//
// helpers_test.go holds what every chain is built from: servers on loopback,
// clients of them, span recorders.
//
// Run them with
//
//	go test -race -count=1 ./chaintest
//
// or one area by name, e.g. go test -run 'TestDedup|TestKeys' ./chaintest. They
// take about half a minute. The ones under open-loop load
// (TestChainAdaptiveLimitUnderOverload) or with a timed hedge (TestChainHedgesOnce)
// can fail on a machine so busy that a loopback call takes tens of milliseconds.
// The stack's benchmarks against the bare call live in the root package
// (BenchmarkStack and its kin).
package chaintest
