// Package handlerwork lets the server layers of one request tell each other what is,
// and what is not, the handler's work, and what the caller was told about it.
//
// The server stack is propagate → retry's server side → shortcircuit (the guard) →
// dedup → handler. Two facts cross layers that do not import each other:
//
//   - The guard holds a ticket for each admitted request: a concurrency slot, the
//     clock that teaches the learned floor and the adaptive limit, the overrun. A
//     request that dedup answers without the handler (a replay, a repeat that waits
//     for the first request with its key) is not the handler's work: dedup says so
//     through the [Guard] the guard put on the context, which gives the slot back and
//     learns nothing; a repeat that then takes the key over asks to be admitted
//     again ([Guard.Resume]).
//   - Retry's server side adds "do not retry" to a failure answer when an outbound
//     retry layer of the handler gave up; dedup, inside it, stores the answer, and
//     must store what the caller received: it reads the same state ([GaveUp]).
//
// A request that carries no idempotency key gets no [Guard]: this costs it nothing.
package handlerwork

import (
	"context"
	"net/http"

	"google.golang.org/grpc/metadata"
)

// Guard is the guard's hold on one admitted request that carries an idempotency key.
// Its methods are called from the request's own goroutine (the layers beneath the
// guard run in it).
type Guard interface {
	// Idle says that the request is not the handler's work from now on: the guard
	// gives its concurrency slot back, and learns nothing from it (no duration for
	// the learned floor or the adaptive limit, no overrun). Calling it again does
	// nothing.
	Idle()
	// Idling reports whether Idle was called and no Resume since.
	Idling() bool
	// Resume admits an idle request again as new work (the repeat took the key over
	// and runs the handler): the floor and the concurrency limit judge it as they
	// judge a request on arrival. It reports false when the guard refuses it; the
	// refusal is then [Guard.RefuseHTTP]'s or [Guard.Refusal]'s. A request that is
	// not idle is admitted already: true.
	Resume(ctx context.Context) bool
	// RefuseHTTP writes the refusal of a failed Resume, as the guard's HTTP
	// middleware writes its refusals.
	RefuseHTTP(w http.ResponseWriter)
	// Refusal is the refusal of a failed Resume as the guard's gRPC interceptor
	// answers it: the trailer and the status error.
	Refusal() (metadata.MD, error)
}

type guardKey struct{}

// WithGuard returns ctx carrying g.
func WithGuard(ctx context.Context, g Guard) context.Context {
	return context.WithValue(ctx, guardKey{}, g)
}

// GuardFrom returns the Guard on ctx, or nil.
func GuardFrom(ctx context.Context) Guard {
	g, _ := ctx.Value(guardKey{}).(Guard)
	return g
}

// Idle calls Idle on the Guard on ctx, if any.
func Idle(ctx context.Context) {
	if g := GuardFrom(ctx); g != nil {
		g.Idle()
	}
}

// InboundKey is the context key under which retry's server side keeps a request's
// inbound state; the value implements [Retries].
type InboundKey struct{}

// Retries is retry's server-side state of one inbound request, as the other layers
// read it.
type Retries interface {
	// GaveUp reports whether an outbound retry layer of the handler gave up on a
	// retryable failure: retry's server side then answers a failure with
	// grpc-retry-pushback-ms: -1.
	GaveUp() bool
}

// GaveUp reports whether ctx belongs to a request under retry's server side whose
// handler's outbound retry layers gave up.
func GaveUp(ctx context.Context) bool {
	r, ok := ctx.Value(InboundKey{}).(Retries)
	return ok && r.GaveUp()
}

// FailureStatus reports whether an HTTP status is a failure that a caller's retry
// layer could retry (5xx, 429, 408, 425): the answers retry's server side marks "do
// not retry" when the handler's own retries gave up.
func FailureStatus(code int) bool {
	return code >= 500 || code == http.StatusTooManyRequests || code == http.StatusRequestTimeout || code == http.StatusTooEarly
}

// Seam is an argument of the methods of [StatusWriter] and [ContextHandler]: only
// the module can name it, so only the toolkit's own types have those methods.
type Seam struct{}

// StatusWriter is retry's server-side response writer, which notes the status of
// the answer (the first status of 200 or more written, 200 when the body or a flush
// comes first, 0 until then), as the guard's own writer would: the guard right
// inside it reads it there instead of wrapping the writer once more.
type StatusWriter interface {
	http.ResponseWriter
	WrittenStatus(Seam) int
}

// ContextHandler is retry's server side, seen from propagate's middleware right
// outside it: ServeHTTPContext serves r as ServeHTTP serves r.WithContext(ctx),
// with one copy of the request instead of two.
type ContextHandler interface {
	http.Handler
	ServeHTTPContext(w http.ResponseWriter, r *http.Request, ctx context.Context, _ Seam)
}
