// Package exactlyonce is a seeded history checker for deduplication by idempotency
// key (package dedup) under random faults. It has no code of its own outside its
// tests: the harness (replicas of one service on loopback, HTTP and gRPC, sharing one
// dedup.Store in memory or on Redis; clients through the toolkit's stack and raw
// clients that resend a key by hand; faults drawn from a seed) records every logical
// request, attempt, handler execution and answer a client saw, and checks the whole
// history against the invariants of exactly-once:
//
//   - a key's handler executions never overlap, and at most one of them completes
//     (an execution released by design, by dedup.Forget, a 504 / 499 or a panic, may
//     be followed by another);
//   - every answer a client saw that names an execution is that execution's answer,
//     of the same scope and key, and a replay (Idempotent-Replayed: true) is the
//     completed execution's answer, byte for byte: status, the handler's headers and
//     trailers, body;
//   - no lease outlives its request's deadline plus the lease margin.
//
// Run it with
//
//	go test ./internal/exactlyonce -run TestHistory -seed=N -requests=M
//
// -long runs 100,000 logical requests per store.
package exactlyonce
