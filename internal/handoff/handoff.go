// Package handoff lets a layer of the toolkit's HTTP client hand one attempt to
// propagate's transport right below it with what it did for it already, so that the
// work is not done twice: the attempt's context may carry the shortened deadline
// propagate would derive (then propagate derives no second context, and the layer's
// cancel, tied to the answer's body, releases it), and the request's header map may be
// the layer's own copy (then propagate writes the budget into it instead of copying
// it once more).
//
// Only packages of the module can name [Attempt], so only they can call
// [Transport.RoundTripAttempt]; what goes out is what propagate's RoundTrip would
// send.
package handoff

import (
	"context"
	"net/http"
)

// Transport is propagate's HTTP transport, seen from the layer above it.
type Transport interface {
	http.RoundTripper
	// DeriveAttempt returns a child of ctx with the deadline propagate would derive for
	// an attempt sent now, and its cancel, or ok false when propagate would derive
	// none (no reserve or cap bites, no deadline to derive from) or refuse the attempt:
	// then the attempt is sent with Derived false, and propagate decides as
	// RoundTrip does.
	DeriveAttempt(ctx context.Context) (child context.Context, cancel context.CancelFunc, ok bool)
	// RoundTripAttempt sends req as RoundTrip does, with what a says the layer
	// above did for it.
	RoundTripAttempt(req *http.Request, a Attempt) (*http.Response, error)
}

// Attempt says what the layer above did for one request.
type Attempt struct {
	// Derived: the request's context is one DeriveAttempt returned (or a child of
	// it), which the layer above cancels once the answer's body is done with.
	Derived bool
	// OwnsHeader: the request's header map is a copy of the layer's own, which
	// nobody else reads or writes: propagate may write into it.
	OwnsHeader bool
}
