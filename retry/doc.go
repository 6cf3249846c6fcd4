// Package retry retries a failed call only where another attempt can succeed, spends
// every attempt and every wait out of the call's one deadline, and keeps the retry
// traffic of a client bounded, so that a blip is absorbed and an outage is not turned
// into a storm.
//
// The client side has the two entry points every deadlinekit package uses:
// [NewTransport] (an [net/http.RoundTripper]) and [UnaryClientInterceptor]. The server
// side, [NewMiddleware] and [UnaryServerInterceptor], enforces the one-layer rule
// described below. Every setting is an [Option] with a documented default; a client
// with no option retries at most twice (3 attempts), with [DefaultBackoff], under a
// budget of its own built with [DefaultBudgetRatio], [DefaultBudgetMinPerSecond] and
// [DefaultBudgetTTL].
//
// # What is retried, and why
//
// A retry helps when the failure was transient and resending cannot do harm. The
// default classifiers ([DefaultHTTPClassifier], [DefaultGRPCClassifier]) decide by
// where the failure happened:
//
//   - gRPC: UNAVAILABLE is retried. DEADLINE_EXCEEDED is retried only when this
//     layer's per-attempt timeout fired, the call's deadline still has room (another
//     instance may answer), and the call may safely run twice: its method is
//     declared idempotent ([WithIdempotentMethods], or idempotency_level
//     NO_SIDE_EFFECTS or IDEMPOTENT in its proto descriptor) or it carries an
//     idempotency-key, since a timed-out attempt may have run; RESOURCE_EXHAUSTED only when the status carries
//     google.rpc.RetryInfo (without it, it is a quota refusal). ABORTED, NOT_FOUND,
//     INVALID_ARGUMENT, PERMISSION_DENIED, UNAUTHENTICATED, UNIMPLEMENTED and INTERNAL
//     are never retried: the request itself, the credentials or the code is wrong.
//   - HTTP: a connection that failed before the request was fully sent (refused, a
//     dial or handshake timeout, reset while sending) is retried for any method,
//     since the server cannot have acted on it. A TLS certificate that does not
//     verify is never retried. A failure after the request was sent (read
//     timeout, reset, 500, 502, 503, 504) is retried only for safe or idempotent
//     methods (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) or for a request carrying an
//     Idempotency-Key: a timeout proves only that no answer arrived, not that nothing
//     was done. 429, 408 and 425 are retried for any method, honouring Retry-After.
//     Other 4xx answers are never retried.
//
// A request whose body cannot be replayed (a Body without GetBody) is sent once.
//
// An attempt that a layer beneath refused before sending anything, for lack of
// budget (package propagate's floor: a [*deadline.BudgetError]), is not a transport
// failure: it is not retried, spends no budget token, and is returned as is, so that
// it still matches [deadline.ErrInsufficientBudget]. One refused beneath with a time
// to come back (package breaker's open circuit: the time until its next probe) is
// retried after that time plus a random share of the backoff (so that the calls
// refused together do not all come back at the probe's instant, where all but the
// probes would be refused again), whatever the method, when that comes before the deadline
// (the deadline rule below, as for a server's pushback); otherwise the call stops at
// once, without spending a token.
//
// # One deadline for all attempts
//
// The call's context deadline covers every attempt and every wait. Each attempt runs
// under a context from [deadline.WithAttemptTimeout]: min(per-attempt limit
// ([WithAttemptTimeout]), time left). Before waiting for the next attempt, the layer
// stops when the time left is not more than the wait plus the floor
// ([WithFloor], default [DefaultFloor], 20 ms): it returns a
// [*DeadlineError], which matches [context.DeadlineExceeded] and
// [deadline.ErrInsufficientBudget] under [errors.Is], says how much was left and how
// much was needed, and wraps the last failure. The gRPC adapter reports it as
// DEADLINE_EXCEEDED; an HTTP server relaying it answers 504. A wait ends at once when
// the context ends.
//
// # Backoff
//
// Retry n waits Base × 2^(n−1), capped at Max, with symmetric jitter of ±Jitter
// sampled independently for each wait and capped again at Max ([Backoff]). The
// default, [DefaultBackoff], is 20 ms, 500 ms, ±20%: 16–24 ms, then 32–48 ms.
//
// # Retry budget
//
// A [Budget] is shared by all calls of a client. Each success deposits a fraction of a
// token (the ratio, default 10%), each retry withdraws one, and deposits expire after a
// time-to-live (default 10 s), like Finagle's RetryBudget. A reserve of a few retries
// per second (default 10) lets a new client retry at once and a quiet one retry at
// all. Retries therefore stay within ratio × recent successes + the floor, and shrink
// by themselves when the downstream fails (fewer successes, fewer tokens). When the
// budget is empty the call stops with a [*BudgetExhaustedError] that wraps the last
// failure. A retry's token is taken when the retry is sent, after its wait: a caller
// that gives up during the wait spends none.
//
// # Pushback
//
// A server may say when to come back: HTTP Retry-After (delta-seconds or an
// HTTP-date), gRPC's grpc-retry-pushback-ms trailer, or google.rpc.RetryInfo in the
// status details. The pushback replaces the backoff for that wait; a pushback of zero
// (a Retry-After date in the past) waits the backoff, jitter included, so that the
// clients a server pushed back do not all return at the same instant. A pushback
// longer than the cap ([WithMaxPushback], default [DefaultMaxPushback]) stops
// retrying rather than returning early to a server that asked for more time; a
// pushback that does not fit before the deadline stops under the deadline rule. A
// negative or malformed pushback means "do not retry".
//
// A guard's refusal for lack of budget (packages shortcircuit and propagate, on a
// server) is an HTTP 504 or a gRPC DEADLINE_EXCEEDED carrying grpc-retry-pushback-ms:
// -1. It is never retried, whatever the method: a retry could only arrive with less
// time. The call returns the refusal itself (the 504 response, the status), with its
// words (the time left, the floor).
//
// # Idempotency keys
//
// With [WithIdempotencyKeys], a call that carries no key gets one, generated once per
// logical call before the first attempt (a random UUIDv4 from crypto/rand,
// [NewIdempotencyKey]) and sent unchanged on every attempt as the Idempotency-Key
// header (gRPC metadata idempotency-key). A key the caller set is kept; a blank one
// (empty or white space) is no key, and is replaced. A key makes a
// non-idempotent request retryable after it was sent: the server is expected to store
// the first result under the key and answer repeats with it.
//
// # One layer retries
//
// Three layers that each retry three times send 27 calls to a failing bottom service
// for one user request. Every attempt after the first carries
// grpc-previous-rpc-attempts (gRPC A6), as an HTTP header or gRPC metadata. A server
// wrapped in [NewMiddleware] or [UnaryServerInterceptor] marks the request context:
// when the inbound request is itself a retry attempt, the outbound retry layers of that
// handler make a single attempt (the caller is already retrying). And when an outbound
// layer of the handler gave up on a retryable failure, the server's failure answer
// carries grpc-retry-pushback-ms: -1 ("do not retry"), so the layers above do not
// retry what was already retried below. The body of an answer that is retried is
// drained and closed within bounds (64 KiB, 100 ms), so that a body that stalls
// cannot hold the retry up until the deadline. With this, a chain whose bottom service is
// down sees at most [WithMaxAttempts] calls per user request.
//
// # Where it sits
//
// On the client, retry is the outermost deadlinekit layer, inside the user's tracing:
// tracing → retry → breaker → hedge → propagate → transport. Each attempt goes through
// breaker, hedge and propagate again, so the grpc-timeout of each attempt is computed
// by propagate when that attempt is sent; this package never writes grpc-timeout
// itself. [WithObserver]
// reports every attempt (number, verdict, wait) to the user's functions; it costs
// nothing when unset. The layer's tracing does not depend on it.
//
// The layer does not panic, and it contains the panics of some functions given to its
// options: a panicking classifier counts as Failed (the attempt's result is returned
// as is), a panicking key generator is replaced by [NewIdempotencyKey], and a
// panicking random source gives no jitter. An observer's panic, like the base
// transport's or the invoker's, is the caller's: it goes through.
//
// # Traces
//
// Each attempt is a child span of the call's span ("attempt primary", "attempt
// retry"), made only when the call's span is recording, with its number, kind,
// outcome and http.request.resend_count or previous-rpc-attempts; an HTTP attempt's
// request carries that span as the downstream's parent. When the call ends, its span
// gets the attempts, the retries and why the layer stopped, saying what happened:
//
//	answered            the last attempt got an answer that is not a failure
//	not_retryable       the failure cannot succeed on retry, or the request cannot be
//	                    resent (a body without GetBody)
//	refused             the downstream refused for lack of budget (504 or
//	                    DEADLINE_EXCEEDED with grpc-retry-pushback-ms: -1)
//	downstream_retried  another failure with -1: a layer below already retried
//	pushback            a malformed pushback
//	pushback_over_cap   the server asked for a longer wait than the cap
//	attempts_exhausted  the attempts ran out
//	deadline            the time left could not pay for the wait and an attempt, the
//	                    deadline passed (during an attempt or a wait), or a layer
//	                    beneath refused to send the attempt for lack of budget
//	budget_empty        the retry budget had no token
//	caller_retries      the caller is itself retrying (the one-layer rule)
//	canceled            the caller cancelled, during an attempt or a wait
//
// See package otelattr for the keys and the metrics (retries sent, budget refusals).
package retry
