// Package dedup is the server half of idempotency keys: the first request that
// carries a key runs the handler and its answer is stored; every repeat of it gets
// that answer without running the handler again, so that a client that retried or
// hedged a write (package retry, package hedge) causes one execution, not two.
//
// Wrap a handler with [NewMiddleware], or a grpc-go server with
// [UnaryServerInterceptor], inside the guard (package shortcircuit) and inside
// retry's server side, as the root package's stack does, so that a request the
// guard refuses records nothing:
//
//	user's tracing → propagate → retry (server side) → shortcircuit → dedup → handler
//
// A replay costs one store read. A replay, a repeat waiting for the first, and
// dedup's own refusals are not the handler's work: under the guard they free the
// request's concurrency slot as soon as dedup knows (before a repeat starts
// waiting), and teach the guard nothing (no learned floor, no service time for
// the concurrency limit, no overrun). A repeat that waited and then takes the key
// over is admitted by the guard again, as a new arrival with the time it has left;
// if the guard refuses it then, its answer is the guard's refusal and the key is
// released: nothing is recorded. The answer stored is the one the first caller
// received: when the handler's own retry layers gave up and retry's server side
// marks a failure "do not retry" (grpc-retry-pushback-ms: -1), the stored answer
// carries it too.
//
//	store := dedup.NewMemoryStore() // one replica; redisstore.New for several
//	h = dedup.NewMiddleware(store)(h)
//
// # The wire
//
// HTTP requests carry the key in Idempotency-Key (draft-ietf-httpapi-idempotency-key-header):
// a bare token or a quoted structured-field string of 1–255 printable ASCII
// characters, the quotes not counted ([ParseKey]). gRPC calls carry it in the
// idempotency-key metadata. A request without a key passes through untouched. The
// answers:
//
//	condition                                  HTTP                      gRPC
//	malformed key                              400                       InvalidArgument
//	the key was used for another request       422                       FailedPrecondition
//	the first with this key still runs         409 + Retry-After         Aborted + grpc-retry-pushback-ms
//	the store cannot be reached                503 + Retry-After         Unavailable + grpc-retry-pushback-ms
//	keyed request body above the limit         413                       (the message is in memory already)
//	keyed request body cut off by its sender   499                       (the message is in memory already)
//	repeat of a completed request              the stored answer, with   the stored answer, with
//	                                           Idempotent-Replayed: true idempotent-replayed: true (header)
//
// The pushback of a 409 / Aborted is the first request's time left until its
// deadline (its lease's end less [WithLeaseMargin], at least 1 ms): package retry
// comes back after it when the caller's deadline allows, and then meets the stored
// answer (or runs, once the first has given its key up).
//
// # What a key means
//
// A key belongs to a scope ([WithScope]: a tenant, an account, taken from the
// context; by default everyone shares one scope) and to one request: its method, its
// path with the query string (gRPC: the full method) and a SHA-256 fingerprint of its
// body (gRPC: of the deterministically marshalled request message), computed while
// the body is read, which holds at most [WithMaxRequestSize] bytes in memory (a
// gRPC, gRPC-Web or Connect-streaming request over HTTP: its first message, the rest
// goes to the handler as it comes, so that a stream is not held back). The
// same key with another method, path or body is refused, and the handler does not
// run. The scope is a security boundary: one scope never receives another scope's
// stored answer, and a scope taken from something the caller merely claims (a header
// that is not authenticated) lets any caller read any other caller's answers by
// guessing their keys. Take it from the authenticated principal.
//
// # The first request, and when a key is released
//
// The first request takes a lease on its key that ends with the request's own
// deadline plus a margin ([WithLeaseMargin]; a request without a deadline holds it
// for [deadline.DefaultBudget]), runs the handler, and stores the completed answer:
// status, headers, body and trailers (those the Trailer header declares and those
// set with [http.TrailerPrefix]: a gRPC or Connect handler mounted on an HTTP mux
// sends its status in them) (gRPC: response message, header and trailer metadata,
// and status), for [WithRetention] (default 24 h). Completed error answers (a 4xx or 5xx
// the handler wrote, a gRPC error) are stored too, and an answer completed after the
// deadline passed is still stored, as long as the lease is still the request's.
//
// The key is released, and a repeat runs the handler again, when the handler did not
// complete: it panicked (the panic goes on unchanged), it called [Forget], or it
// answered 504 / 499 (gRPC DeadlineExceeded / Canceled: a gRPC handler's plain
// context error, or shortcircuit.Check's refusal, counts as what the wire says), or
// its context ended before it wrote anything. A handler that may have done its side
// effect must not answer 504 for it. Over HTTP, the key is released too when there is
// no HTTP answer to store (101 Switching Protocols, a hijacked connection) and when
// the request was a stream of more than one message: neither is deduplicated. A gRPC
// response that cannot be marshalled is answered Internal, and that answer is stored.
//
// The key is released too when the answer tells the caller to come back later: a
// 503 or 429 with Retry-After or a non-negative grpc-retry-pushback-ms (gRPC:
// Unavailable or ResourceExhausted with a non-negative grpc-retry-pushback-ms
// trailer, or a google.rpc.RetryInfo without one), unless it also says "do not
// retry" (-1). Such an answer is not final: stored, it would be replayed for the
// whole retention to a caller that came back as told. Coming back runs the handler
// again, so a handler that did its side effect must not answer "come back" for it
// either (relaying a downstream's overload after a write has gone through is such
// an answer: answer the write's outcome, or a failure without a wait).
//
// An answer larger than [WithMaxResponseSize] (over HTTP: status, headers, body and
// trailers; gRPC: its message, metadata and status together) reaches the first
// caller in full but is not stored: the key is marked completed-but-not-kept, and a
// repeat gets 410 Gone (gRPC AlreadyExists) with a message naming the first answer's
// status, never a second execution. The refusal is not the stored answer and is not
// marked Idempotent-Replayed (gRPC idempotent-replayed).
//
// The same holds for an HTTP answer that did not reach the first caller in full
// (a write failed: the caller left, the connection broke) unless it is provably
// whole, and for one whose body does not match the Content-Length its handler set.
// What the handler writes after a failed write is still recorded, so an answer
// written in full, with a Content-Length, is stored whole and a repeat (the caller
// whose download broke, coming back) gets all of it. Without a Content-Length a
// whole answer cannot be told from one whose handler stopped at the error, as most
// do: set it on answers that a broken connection must not cost.
//
// # Repeats
//
// A repeat that arrives while the first still runs waits for the first's answer, but
// never past its own deadline less the floor ([WithFloor], default
// [deadline.DefaultFloor]; at least [MinRefusalReserve], so that its refusal reaches
// its caller in time); if the first is still running then, it gets 409 / Aborted
// with the first's time left. If the first is released while a repeat waits (a panic,
// Forget, its deadline), the repeat takes the lease over and runs.
//
// # Keys travel
//
// A handler serving a keyed request often writes downstream itself. So that a
// re-run of it (its first run's replica died after the downstream write, its lease
// ended, a repeat runs it again) meets each downstream's stored answer instead of
// repeating the side effect, the run's context carries a derivation of keys from
// the request's key in its scope: package retry (over HTTP, gRPC and connect,
// with or without its WithIdempotencyKeys) gives the n-th keyed write the handler sends (a request
// with a method that is not idempotent; gRPC: a method not declared idempotent) the
// n-th key derived from the request's key, the same on every run, instead of a
// random one. Every attempt and hedge of one write shares its key, as ever. A key is
// "dk1." and 43 characters of a SHA-256 of the key in its scope: two tenants with
// the same key derive different ones, and no derived key shows the scope. A
// replay runs nothing and derives nothing.
//
// A handler that puts the request's own key on a downstream write (forwarded gRPC
// metadata, metadata.NewOutgoingContext(ctx, incoming); an Idempotency-Key header
// copied by hand) would send one key on two different writes, the second refused
// as another request's (422 / FailedPrecondition) or, identical to the first,
// silently answered with the first's answer: package retry sends the derived key in
// its place, with or without WithIdempotencyKeys. Any other key the handler sets is
// sent as it is.
//
// What it assumes of the handler: its keyed writes go out in the same order on
// every run. Writes sent at once from goroutines may swap their keys between runs;
// a downstream then refuses the swapped write (422 / FailedPrecondition, the key's
// first request differs), never runs it twice. Give such writes keys of their own,
// from [DerivedKey] with a label per write:
//
//	req.Header.Set("Idempotency-Key", dedup.DerivedKey(ctx, "reserve:"+itemID))
//
// [WithoutKeyDerivation] turns it off (the default is on): the handler's writes
// get random keys, and a forwarded key goes out unchanged.
//
// A server that does not deduplicate (a gateway in front of a deduplicating
// service) passes keys on with [PassKeys] (the root stack's NewHandler and
// ServerOptions put it in when they are given no store): its handler's writes
// carry keys derived from its request's key, the same when its caller sends the
// request again, which the service below deduplicates.
//
// # Stores
//
// A [Store] keeps one record per key: running (a lease with a token and an expiry) or
// done (the encoded answer and its retention). [NewMemoryStore] is the embedded
// default for one replica, bounded as a whole ([WithMaxEntries], [WithMaxBytes]: no
// answer is evicted while the store holds less than its bounds); package
// dedup/redisstore shares one table between replicas. [Store] is small enough to write on SQL: see its documentation. When the
// store cannot be reached, or does not answer before the request's deadline (a
// stalled server), a keyed request is answered 503 / Unavailable and the handler
// does not run, unless [WithRunWithoutStore] says otherwise; only a caller that left
// (its context canceled) is answered 499 / Canceled. A completion or
// a release that the store fails (not one refused for a lost lease) is tried again in
// the background, with a growing pause, until it succeeds or the lease ends; the
// answer goes out at once.
//
// # Telemetry
//
// The server span in the context gets deadlinekit.dedup.outcome ("first",
// "replayed", "waited", "conflict", "mismatch", "released", "store_unavailable",
// "malformed", "not_kept") and deadlinekit.dedup.wait_ms; a repeat refused 409 /
// Aborted gets deadlinekit.dedup.holder_left_ms (when the first's lease ends), and
// one that waited gets an event "waited for the first request" per wait, with its
// deadlinekit.dedup.wait_ms; the metrics
// deadlinekit.dedup.outcomes (by outcome), deadlinekit.dedup.wait and
// deadlinekit.dedup.store.duration (by operation) come from the global MeterProvider.
package dedup
