// Package reliability holds deadlinekit's cross-package reliability tests: hostile
// inbound requests against the whole server stack, panics in user code under every
// server layer, and (in the files of the other suites) leaks, load and faults. It
// has no API; everything it proves lives in its _test.go files, and RELIABILITY.md
// gives each test, what it tried, the figure it reached and the command to rerun it.
//
// The server stack these tests build is the one the packages document, outermost
// first:
//
//	propagate → retry (server side) → shortcircuit → handler
//
// # Leaks, load and faults
//
// These run on real servers on 127.0.0.1 through the client stack the packages
// document, outermost first: retry → hedge → propagate → transport (net/http, or the
// three gRPC unary interceptors in that order). By file prefix:
//
//   - leak_*: 10,000 hedged and retried HTTP calls against a server with a heavy
//     tail and failures, with calls cancelled by their callers mid-flight and hedge
//     losers cancelled; afterwards the server's open connections (counted by its
//     listener) and the goroutines are back to their starting count, and goleak
//     finds nothing.
//   - load_*: 256 concurrent callers against a backend alternating fast phases and
//     10× slower ones, with 30% retryable failures: the hedge cap (hedges ≤ 15% of
//     primaries + hedge.Burst) and the retry budget (retries ≤ 10% of successes +
//     the floor over its window) hold exactly, and their rates stay within one
//     percentage point of the settings.
//   - fault_*: the downstream killed and restarted mid-run, connections refused,
//     reset before and after the request is sent, a downstream that never answers
//     (or stalls after its headers), over HTTP and gRPC: every call ends by its
//     deadline + 10 ms (50 ms under -race; the lateness distribution is logged), a
//     POST without Idempotency-Key reaches the server at most once, and a keyed call
//     always arrives with one and the same key.
//
// go test ./... runs the short versions: the load test runs for 5 s (1 s with
// -short, 2 s under -race). The long version is behind a flag; -v prints the figures:
//
//	go test ./reliability/ -run TestLoad -reliability.load=20s -v
//	go test -race ./reliability/ -run TestLoad -reliability.load=10s -v
//	go test ./reliability/ -run 'TestLeak|TestFaults' -v
//
// -reliability.callers sets the number of concurrent callers of TestLoad (256).
package reliability
