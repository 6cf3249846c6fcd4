// Package shortcircuit is the server guard: it refuses a request before the handler
// runs when the time the request has left cannot pay for the work, and answers at
// once with what the caller's retry layer needs to know: 504 / DeadlineExceeded and
// "do not retry" for a request that cannot finish in time, 503 / ResourceExhausted
// and when to come back for one refused because the server is full.
//
// Wrap a handler with [NewMiddleware], or a grpc-go server with
// [UnaryServerInterceptor] and [StreamServerInterceptor], inside whatever puts the
// caller's deadline on the context (package propagate):
//
//	user's tracing (otelhttp, otelgrpc) → propagate → shortcircuit → handler
//
// By default the floor follows what each route's handler takes: the 5th percentile
// (P5) of its recent successful durations, between 1 ms and 1 s, so that it refuses
// only what has little chance to finish ([WithFloor] says why); a static floor
// replaces it. The floor in force is the largest of [WithFloor], [WithFloorFunc]
// and [WithAdaptiveFloor]; [WithMaxConcurrency] and [WithAdaptiveConcurrency] add a limit
// whose queue admits a request only if it can finish in time; a request that finds
// a slot free is left to the floor, when the floor is learned. A request without a deadline
// is never refused for its budget. [Check] makes the same test inside a handler.
//
// The limit sheds by criticality, then by deadline: the level on the request's
// context (package criticality; critical when none) decides before the queue's
// order. Its queue serves the higher levels first, a request's predicted wait counts
// only the requests served before it, and a full queue gives a newcomer the place of
// the lowest-level request it holds, answered at once with when to come back. So a
// level is refused only while every lower one is, as the SRE book has it, under the
// static and the adaptive limit alike; within a level nothing changes. A running
// handler keeps its slot, and the adaptive limit learns the same from every level;
// the step it keeps above the handler's capacity is for the highest level seen
// lately, since a request let in there waits inside the handler, out of the
// queue's order. A request that finds a slot free pays nothing for this: its level
// is read only when it must queue or comes for that step. queue.go tells the rules
// and why they keep the contract.
//
// Under the guard, package dedup answers repeats of a request that carries an
// idempotency key without running the handler: a replay of the first's answer, or
// a wait for it. That is no handler work: dedup tells the guard, which gives the
// request's concurrency slot back at once (a repeat waiting for the first holds
// none), learns nothing from it (no floor, no service time, no overrun), and
// reports it to the observers as [Event].Deduplicated; a repeat that takes the key
// over is admitted again, as a new arrival, before the handler runs. A request
// without an idempotency key pays nothing for this but a look at its headers.
package shortcircuit
