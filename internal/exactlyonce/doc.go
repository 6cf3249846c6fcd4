// Package exactlyonce is a seeded history checker for deduplication by idempotency
// key (package dedup) under random faults. It has no code of its own outside its
// tests: the harness (replicas of one service on loopback, HTTP, gRPC and connect
// (package connectkit, in the Connect, gRPC and gRPC-Web protocols), sharing one
// dedup.Store in memory or on Redis under one scope; clients through the toolkit's
// stack and raw clients that resend a key by hand, a gRPC or connect key sometimes
// over the other, as both serve the same procedure; faults drawn from a seed)
// records every logical request, attempt, handler execution and answer a client
// saw, and checks the whole history against the invariants of exactly-once:
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
// TestHistory/processes and TestHistory/processes-aof run the replicas in their own
// processes (this test binary again, as runReplica, on listeners the test
// keeps open across kills), sharing one real Redis. Each process records every
// handler execution to its own append-only file, one line per event, which survives
// a SIGKILL. The test SIGKILLs replicas at times drawn from the seed (most often
// mid-request) and restarts them, and restarts Redis too: without persistence
// (processes: a restart loses every record and lease) or with an append-only file
// (processes-aof). The checker knows when each kill and restart happened, and
// allows exactly what they allow:
//
//   - an execution killed with its process may be followed by another once its
//     lease (its deadline plus the margin) has ended, not before;
//   - an execution that completed but whose answer the store never took (its
//     process killed, or the store down or failing the completion, and no retry
//     landing before the lease ended) may be followed by another once its lease
//     has ended;
//   - after a restart that lost the records, the key may run again at once.
//
// Run it with
//
//	go test ./internal/exactlyonce -run TestHistory -seed=N -requests=M
//
// -long runs 100,000 logical requests per store (the process runs too; by default
// they run 1,200 each).
package exactlyonce
