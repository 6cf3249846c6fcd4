package shortcircuit

import (
	"context"
	"net/http"

	"google.golang.org/grpc/metadata"

	"github.com/deadlinekit/deadlinekit/internal/handlerwork"
	"github.com/deadlinekit/deadlinekit/internal/idempotency"
)

// A request that carries an idempotency key may be answered beneath the guard
// without the handler: dedup replays the stored answer of the first request with its
// key, or waits for the first's answer. That is not the handler's work (DESIGN: it
// teaches no floor, holds no concurrency slot and counts in no overrun), so the
// guard hands such a request a [handlerwork.Guard] on its context, through which
// dedup says so ([work.Idle]) and, when the repeat takes the key over and runs the
// handler after all, asks to be admitted again ([work.Resume]). A request without a
// key gets none, and pays for nothing but the look at its headers.

// work is the guard's hold on one admitted keyed request: it owns the request's
// ticket from admission on.
type work struct {
	g *guard
	t ticket
}

var _ handlerwork.Guard = (*work)(nil)

// tracks reports whether the guard keeps anything for an admitted request that the
// request's not being handler work would change: a slot, a duration, an overrun.
func (g *guard) tracks(t *ticket) bool { return g.measure || t.has }

// keyedHTTP reports whether r carries an idempotency key.
func keyedHTTP(r *http.Request) bool {
	_, ok := r.Header[idempotency.Header]
	return ok
}

// keyedGRPC reports whether the incoming metadata of ctx carries an idempotency key.
func keyedGRPC(ctx context.Context) bool {
	return len(metadata.ValueFromIncomingContext(ctx, idempotency.Key)) > 0
}

// hold moves the ticket t of an admitted keyed request to the heap, and puts the
// hold on ctx.
func (g *guard) hold(ctx context.Context, t *ticket) (*work, context.Context) {
	w := &work{g: g, t: *t}
	return w, handlerwork.WithGuard(ctx, w)
}

// Idle gives the slot back, and makes done learn nothing from the request.
func (w *work) Idle() {
	t := &w.t
	if t.idle || t.decision != Admitted {
		return
	}
	t.idle = true
	if w.g.lim != nil && !t.released {
		t.released = true
		w.g.lim.release(t.entry.slot, 0) // zero: no duration to learn from
	}
}

// Idling reports whether the request is idle.
func (w *work) Idling() bool { return w.t.idle }

// Resume admits an idle request again, as a new arrival with the time it has left.
func (w *work) Resume(ctx context.Context) bool {
	if !w.t.idle {
		return w.t.decision == Admitted
	}
	route := w.t.route
	w.t = ticket{}
	if w.g.admit(ctx, route, &w.t) {
		return true
	}
	w.t.idle = true // refused: done reports nothing more (observe reported the refusal)
	return false
}

// RefuseHTTP writes the refusal of a failed Resume.
func (w *work) RefuseHTTP(rw http.ResponseWriter) { refuseHTTP(rw, &w.t) }

// Refusal is the refusal of a failed Resume, as gRPC's trailer and status.
func (w *work) Refusal() (metadata.MD, error) { return refusalStatus(&w.t) }

// doneIdle ends a request answered without the handler: the observers see it as
// [Event.Deduplicated]; nothing is learned, no overrun counted. A request refused on
// Resume was reported then.
func (g *guard) doneIdle(ctx context.Context, t *ticket) {
	if t.decision != Admitted {
		return
	}
	for _, o := range g.observers {
		o(ctx, Event{Route: t.route, Admission: Admitted, Deduplicated: true, HasDeadline: t.has,
			Remaining: t.left, Floor: t.floor, Queued: t.entry.queued, Wait: t.entry.wait})
	}
}
