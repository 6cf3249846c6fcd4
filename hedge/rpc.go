package hedge

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/idempotency"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/internal/record"
	"github.com/deadlinekit/deadlinekit/internal/rpc"
)

// The layer for frameworks this package does not import (package connectkit): a call
// is hedged as [Hedger.UnaryClientInterceptor] hedges a gRPC call, by procedure, on
// the same verdicts of the same codes; each copy is a send of its own, whose answer
// (the framework's response) is the call's when it wins.
func init() {
	// idempotent: the procedures the client declares idempotent beside h's own.
	rpc.Register("hedge", func(h *Hedger, idempotent []string) rpc.Layer {
		also := addMethods(nil, idempotent)
		return rpc.Layer{Client: func(ctx context.Context, c *rpc.Call, send rpc.Send) rpc.Answer {
			ctx, span := record.StartCall(ctx, record.GRPC, c.Procedure)
			a := h.rpcUnary(ctx, c, send, also[c.Procedure])
			span.End(a.Err)
			return a
		}, Resends: true}
	})
}

// rpcUnary hedges one call; declared says the client declared its procedure
// idempotent.
func (h *Hedger) rpcUnary(ctx context.Context, c *rpc.Call, send rpc.Send, declared bool) rpc.Answer {
	ev := Event{Target: c.Procedure, Attempts: 1}
	t := h.target(c.Procedure, grpcMethod)
	idem, keyedWrite := h.grpcIdempotent(ctx, t, c.Procedure, declared)
	if c.Idempotent {
		idem, keyedWrite = true, false
	}
	hedgeable := idem || keyedWrite && h.cfg.keyedWrites
	covered := h.covered(ctx)
	if hedgeable && h.marks() || covered {
		ctx = withMark(ctx)
	}
	if !hedgeable || covered {
		switch {
		case keyedWrite && !hedgeable:
			h.keyedWrites.Add(1)
			ev.Skipped = SkipKeyedWrite
		case !hedgeable:
			h.notIdempotent.Add(1)
			ev.Skipped = SkipNotIdempotent
		default:
			h.coveredCalls.Add(1)
			ev.Skipped = SkipCovered
			start := time.Now()
			a := send(ctx)
			if a.Err == nil {
				h.learnCovered(t, start)
			}
			recordSentOnce(ctx, &ev)
			h.observe(ctx, &ev)
			return a
		}
		a := send(ctx)
		recordSentOnce(ctx, &ev)
		h.observe(ctx, &ev)
		return a
	}
	p := h.plan(t)
	if p.skip != "" {
		ev.Skipped = p.skip
		a := send(ctx)
		if a.Err == nil {
			p.learnLatency()
		}
		recordSentOnce(ctx, &ev)
		h.observe(ctx, &ev)
		return a
	}
	ev.Delay = p.delay
	cl := &call[rpc.Answer]{}
	keyed := idempotency.Keyed(metadata.ValueFromOutgoingContext(ctx, idempotency.Key))
	cl.callSetup = callSetup[rpc.Answer]{hedger: h, protocol: record.GRPC, plan: p, adapter: &rpcAttempts{cfg: h.cfg, next: send, copy: c.Copy, keyed: keyed, keyedWrite: keyedWrite}, event: &ev}
	r, cancel, ok := cl.run(ctx)
	if !ok {
		h.observe(ctx, &ev)
		return rpc.Answer{Err: status.FromContextError(ctx.Err()).Err()}
	}
	cancel()
	h.observe(ctx, &ev)
	return r.value
}

// rpcAttempts sends the copies of one call, each a send of its own.
type rpcAttempts struct {
	cfg  *config
	next rpc.Send
	// copy is the call's [rpc.Call.Copy]: nil, every copy sends through next.
	copy  func() rpc.Send
	keyed bool // the call carries an idempotency key: see grpcDedupConflict
	// keyedWrite: the call is hedged for its key alone: every copy is marked covered.
	keyedWrite bool
	// The send of each hedge, made by ready; element n is used by attempt n only.
	hedges [MaxAttempts]rpc.Send
}

func (p *rpcAttempts) prepare(int) error { return nil }
func (p *rpcAttempts) abandon(int)       {}

func (p *rpcAttempts) send(ctx context.Context, n int, _ record.Attempt) (rpc.Answer, error) {
	send := p.next
	if n > 0 {
		ctx = withAttempt(ctx, n, p.cfg.markOf(n, p.keyedWrite))
		if s := p.hedges[n]; s != nil {
			send, p.hedges[n] = s, nil
		}
	}
	a := send(ctx)
	return a, a.Err
}

// ready takes hedge n's copy of the caller's request ([rpc.Call.Copy]: connectkit's
// copies its header and message). It runs under the call's lock while the call is
// undecided ([readier]): a hedge still running once the call has returned (a
// loser, the interceptors beneath it, connect-go marshalling its message) reads
// its own copy, not the request the caller may change and send again by then. The
// primary sends the caller's request, on the caller's goroutine.
func (p *rpcAttempts) ready(_ context.Context, n int) {
	if p.copy != nil {
		p.hedges[n] = p.copy()
	}
}

// verdict is [grpcAttempts.verdict] on an answer's metadata.
func (p *rpcAttempts) verdict(n int, a rpc.Answer, err error) verdict {
	if err == nil {
		return success
	}
	if errors.Is(err, deadline.ErrInsufficientBudget) {
		return refused
	}
	if vs := a.Meta.Get(pushback.Key); n > 0 && len(vs) > 0 && pushback.Refuses(vs[0]) {
		return refused
	}
	code := status.Code(err)
	if code == codes.Aborted && p.keyed && grpcDedupConflict(a.Meta) {
		return refused
	}
	return p.cfg.codeVerdict(code)
}

func (p *rpcAttempts) failure(_ rpc.Answer, err error) error { return err }

func (p *rpcAttempts) discard(_ rpc.Answer, _ error, cancel context.CancelFunc) { cancel() }
