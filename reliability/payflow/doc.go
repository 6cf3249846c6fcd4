// Package payflow is the payments chain of issue 36 run end to end, each service in
// its own process, as a new user would write it from the README. It has no API;
// TestPayflow is all of it.
//
// The chain, every process this test binary again (TestMain runs the role named by
// the environment variable PAYFLOW_ROLE instead of the tests):
//
//   - client: an open-loop load (150 payments a second, 50 under -short), each
//     payment with its own Idempotency-Key and a 3 s budget, sent through the root
//     client stack (deadlinekit.NewTransport), whose retries resend a payment whose
//     answer was lost or refused;
//   - gateway: HTTP behind deadlinekit.NewHandler, calling the payments replicas over
//     gRPC through deadlinekit.DialOptions (round robin, a circuit per replica); the
//     stack passes the payment's key on, derived (dedup.PassKeys), and the gateway
//     answers failures through deadlinekit.Public;
//   - payments, two replicas: gRPC behind deadlinekit.ServerOptions with WithDedup on
//     a redisstore over a go-redis client with its default options, all on one
//     redis-server (internal/redistest); each payment charges the ledger, through
//     the root client stack with retry.WithIdempotencyKeys, between two spells of
//     work (the one after the charge is where a replica killed mid-request has
//     charged and not answered);
//   - ledger: HTTP behind deadlinekit.NewHandler with WithDedup on a memory store; it
//     counts the charges of each payment, so that a payments replica's write with a
//     key derived from the payment's key is charged once.
//
// Scenarios, each on fresh processes and a fresh Redis: answers-dropped (the client's
// transport drops 10% of the answers after the gateway sent them), replica-killed
// (one payments replica SIGKILLed 1.5 s into the run), redis-killed (Redis killed
// 1.5 s in and restarted, empty, 2 s later), redis-paused (Redis SIGSTOPped for 2 s).
// Each logs: payments sent, answered (a 200 within the budget and the client's
// retries), charged, charged twice, and for the Redis outages the payments refused
// (any other end) before, during and after the outage, by the time the client saw
// the refusal, and how long after the outage the last one came.
//
// It fails when a payment is charged twice (in any scenario), when an answered
// payment was never charged, and when fewer than 95% of the payments are answered
// across the 2 s Redis outage (the goals of issue 36; not under -race, whose
// processes run several times slower). That last bound is relative
// to the same run: 95% of the share answered of the payments sent more than 500 ms
// before the fault (all of them on a machine with time to spare), so that a machine
// too loaded to answer in 3 s without any fault does not fail it. RELIABILITY.md, "The payments
// chain", has the figures.
//
//	go test ./reliability/payflow -run TestPayflow -v           # 150 payments/s
//	go test ./reliability/payflow -run TestPayflow -v -short    # 50 payments/s
//
// With PAYFLOW_OTLP set (to a host:port, or to anything else for 127.0.0.1:4317),
// every process exports its traces over OTLP (otelhttp and otelgrpc around the
// stack, as the README shows), under the service names payflow-client,
// payflow-gateway, payflow-payments and payflow-ledger, for a look in Jaeger.
package payflow
