package hedge

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/attempts"
	"github.com/deadlinekit/deadlinekit/internal/idempotency"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/internal/record"
	"github.com/deadlinekit/deadlinekit/internal/rpc"
)

// UnaryClientInterceptor returns [Hedger.UnaryClientInterceptor] of a [Hedger] of its
// own, made from opts: it hedges idempotent unary calls after the observed latency
// percentile of their method.
func UnaryClientInterceptor(opts ...Option) grpc.UnaryClientInterceptor {
	return New(opts...).UnaryClientInterceptor()
}

// UnaryClientInterceptor returns a client interceptor that hedges idempotent unary
// calls with h's state. The rest of the chain must honour each attempt's context:
// losers are stopped by cancelling it.
//
// A method is idempotent when [WithIdempotentMethods] names it, or when its
// descriptor in the protobuf registry (protoregistry.GlobalFiles, filled by the
// generated code) declares idempotency_level NO_SIDE_EFFECTS or IDEMPOTENT; a call
// of another method whose outgoing metadata has an idempotency-key (a keyed write)
// is hedged under [WithKeyedWrites]; other calls go through once, unchanged.
// Each hedge sends a copy of the request (taken while the call is undecided, so that
// a loser still running once the call has returned never reads the caller's message,
// which the caller may change and send again), decodes into a reply of its own (the
// reply must be a proto.Message) and carries grpc-previous-rpc-attempts in its metadata (added to the count of a retry
// layer above). A hedgeable call carries deadlinekit-hedged-above, and a call made
// under the context of a request a layer above may send again is sent once (the
// chain rule: see the package documentation). When it wins, its reply is copied into the caller's, as are the
// header, trailer and peer asked for with grpc.Header, grpc.Trailer and grpc.Peer.
// The caller's grpc.OnFinish callbacks are taken off every copy and run once, with
// the call's result. The other call options (credentials, codec, compressor, message
// sizes, wait-for-ready, authority, StaticMethod, …) configure each copy and report
// nothing back, so every copy carries them. The interceptor returns only once the
// primary has returned, so the caller's reply is never written after it.
//
// An answer is OK (a success) or a code that judges the request itself, which any
// copy would get: INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED,
// UNAUTHENTICATED, FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED, ABORTED; any
// other code is a failure. A refusal for lack of budget is a hedge's
// DEADLINE_EXCEEDED with the trailer grpc-retry-pushback-ms -1, or an error matching
// deadline.ErrInsufficientBudget (propagate's refusal before sending). On a call with
// an idempotency-key, ABORTED with a positive grpc-retry-pushback-ms in the trailer
// is a server's deduplication refusing a copy while another holds the key: refused
// too, whichever copy got it (the primary's trailer is read where the caller asked
// for it with grpc.Trailer, or where the layer asks for it), so that the copy that
// runs brings the answer.
func (h *Hedger) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return h.unaryInterceptor(nil)
}

// The interceptor of a Hedger shared by a stack (deadlinekit.WithSharedHedger) that
// declares methods idempotent of its own (deadlinekit.WithIdempotentMethods): the
// declaration is the client's, whichever Hedger it uses.
func init() {
	rpc.Register("hedge.grpc", func(h *Hedger, idempotent []string) grpc.UnaryClientInterceptor {
		return h.unaryInterceptor(addMethods(nil, idempotent))
	})
}

// unaryInterceptor is [Hedger.UnaryClientInterceptor], with the methods in also
// declared idempotent beside h's own.
func (h *Hedger) unaryInterceptor(also map[string]bool) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		// The call's span: a layer above (retry) started it, or grpc-go's
		// OpenTelemetry plugin did, or it is started here.
		ctx, call := record.StartCall(ctx, record.GRPC, method)
		declared := also[method]
		return call.Unary(func() error { return h.unary(ctx, method, req, reply, cc, invoker, opts, declared) })
	}
}

// unary hedges one call; declared says the client declared method idempotent.
func (h *Hedger) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption, declared bool) error {
	ev := Event{Target: method, Attempts: 1}
	msg, isMsg := reply.(proto.Message)
	t := h.target(method, grpcMethod)
	idem, keyedWrite := h.grpcIdempotent(ctx, t, method, declared)
	switch {
	case !idem && !keyedWrite:
		h.notIdempotent.Add(1)
		ev.Skipped = SkipNotIdempotent
	case keyedWrite && !h.cfg.keyedWrites:
		h.keyedWrites.Add(1)
		ev.Skipped = SkipKeyedWrite
	case !isMsg:
		h.notReplayable.Add(1)
		ev.Skipped = SkipNotIdempotent
	}
	covered := h.covered(ctx)
	caller := ctx // without the mark: its outgoing metadata is read there
	if ev.Skipped == "" && h.marks() || covered {
		ctx = withMark(ctx)
	}
	if ev.Skipped == "" && covered {
		h.coveredCalls.Add(1)
		ev.Skipped = SkipCovered
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil {
			h.learnCovered(t, start)
		}
		recordSentOnce(ctx, &ev)
		h.observe(ctx, &ev)
		return err
	}
	if ev.Skipped != "" {
		err := invoker(ctx, method, req, reply, cc, opts...)
		recordSentOnce(ctx, &ev)
		h.observe(ctx, &ev)
		return err
	}

	p := h.plan(t)
	if p.skip != "" {
		ev.Skipped = p.skip
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil {
			p.learnLatency()
		}
		recordSentOnce(ctx, &ev)
		h.observe(ctx, &ev)
		return err
	}
	keyed := keyedWrite || idempotency.Keyed(metadata.ValueFromOutgoingContext(caller, idempotency.Key))
	if !keyed && !h.cfg.noFastPath && !hasOnFinish(opts) {
		return h.slotUnary(ctx, p, grpcAttempts{cfg: h.cfg, method: method, req: req, reply: msg, replyType: msg.ProtoReflect().Type(), cc: cc, invoker: invoker, opts: opts})
	}
	gc := grpcCalls.Get().(*grpcCall)
	// The reply's type is read now: once the primary runs, it writes to the reply.
	gc.attempts = grpcAttempts{cfg: h.cfg, method: method, req: req, reply: msg, replyType: msg.ProtoReflect().Type(), cc: cc, invoker: invoker, opts: opts, keyedWrite: keyedWrite}
	if keyed {
		gc.attempts.watchPrimaryTrailer()
	}
	return h.hedgedUnary(ctx, gc, p)
}

// hedgedUnary sends the call gc.attempts describes, hedged as p says.
func (h *Hedger) hedgedUnary(ctx context.Context, gc *grpcCall, p plan) error {
	// The caller's completion callbacks run once, with the call's result, not once
	// per copy: no copy carries them.
	var onFinish []func(error)
	gc.attempts.opts, onFinish = splitOnFinish(gc.attempts.opts)
	gc.event = Event{Target: gc.attempts.method, Attempts: 1, Delay: p.delay}
	gc.call.callSetup = callSetup[struct{}]{hedger: h, protocol: record.GRPC, plan: p, adapter: &gc.attempts, event: &gc.event}
	r, cancel, ok := gc.call.run(ctx)
	err := h.ended(ctx, gc, r, cancel, ok)
	for _, f := range onFinish {
		f(err)
	}
	return err
}

// ended is the end of a hedged call, once gc.call has run: its winner r (ok false:
// none, the caller gave up) is adopted, its cancel called, the observers told, and
// gc released when nothing else refers to it. It returns the call's error.
func (h *Hedger) ended(ctx context.Context, gc *grpcCall, r result[struct{}], cancel context.CancelFunc, ok bool) error {
	var err error
	if !ok {
		err = status.FromContextError(ctx.Err()).Err()
		h.observe(ctx, &gc.event)
	} else {
		if r.n > 0 {
			gc.attempts.adopt(r.n)
		}
		cancel()
		err = r.err
		h.observe(ctx, &gc.event)
		if gc.call.reusable {
			gc.release()
		}
	}
	return err
}

// hasOnFinish reports whether opts has a grpc.OnFinish callback.
func hasOnFinish(opts []grpc.CallOption) bool { return firstOnFinish(opts) >= 0 }

// firstOnFinish is the index of the first grpc.OnFinish callback in opts, -1 for none.
func firstOnFinish(opts []grpc.CallOption) int {
	for i, o := range opts {
		if _, ok := o.(grpc.OnFinishCallOption); ok {
			return i
		}
	}
	return -1
}

// splitOnFinish takes the grpc.OnFinish callbacks out of opts. Without any, opts is
// returned as it is, with nothing allocated.
func splitOnFinish(opts []grpc.CallOption) ([]grpc.CallOption, []func(error)) {
	first := firstOnFinish(opts)
	if first < 0 {
		return opts, nil
	}
	kept := make([]grpc.CallOption, first, len(opts)-1)
	copy(kept, opts[:first])
	var fs []func(error)
	for _, o := range opts[first:] {
		if f, ok := o.(grpc.OnFinishCallOption); ok {
			if f.OnFinish != nil {
				fs = append(fs, f.OnFinish)
			}
			continue
		}
		kept = append(kept, o)
	}
	return kept, fs
}

// grpcCalls keeps the memory of hedged gRPC calls for reuse. Most hedgeable calls
// answer before their hedge is due, and each would otherwise allocate its state (with
// its event) and its timer's func, only to drop them when it returns. Reuse is
// safe only for a call that ends reusable ([call.reusable]): no hedge was given an
// index, so no hedge goroutine or loser's discard holds it, and its timer was
// stopped before it fired, so fireFunc will not run for this call any more. Every
// other call is left to the garbage collector. (An HTTP call cannot be reused: the
// winner's response body, which the caller keeps, lives in it.)
var grpcCalls = sync.Pool{New: func() any { return new(grpcCall) }}

// grpcCall is everything a hedged gRPC call allocates.
type grpcCall struct {
	call     call[struct{}]
	attempts grpcAttempts
	event    Event
}

// release zeroes gc, so that the pool holds nothing of the caller's, and puts it
// back. fireFunc is kept: it is bound to gc.call, which stays where it is. The timer,
// stopped before it fired and bound to fireFunc, is kept too when it was made outside
// any testing/synctest bubble: arming it again costs a fraction of a new one. A timer
// made in a bubble belongs to it, and the pool's next caller may be in another, or
// outside; and a timer made outside, armed again in a bubble, would run on the real
// clock: a call in a bubble makes its own (TestHedgerAcrossBubbles).
func (gc *grpcCall) release() {
	k := gc.call.keep()
	*gc = grpcCall{}
	gc.call.restore(k)
	grpcCalls.Put(gc)
}

// grpcAttempts sends the copies of one call.
type grpcAttempts struct {
	cfg       *config
	method    string
	req       any
	reply     proto.Message
	replyType protoreflect.MessageType
	cc        *grpc.ClientConn
	invoker   grpc.UnaryInvoker
	opts      []grpc.CallOption
	// Each hedge's own request, reply and call options; element n is written by
	// ready under the call's lock, used by attempt n, and read by the caller once
	// attempt n's result has reached it.
	hedges [MaxAttempts]*hedgeCall
	// keyed: the call carries an idempotency key, and primaryTrailer is where the
	// primary's trailer is written (the caller's, or ownTrailer), so that a copy
	// the server's deduplication refused is known as such (grpcDedupConflict).
	keyed          bool
	primaryTrailer *metadata.MD
	ownTrailer     metadata.MD
	// keyedWrite: the call is hedged for its key alone ([WithKeyedWrites]): every
	// copy is marked covered.
	keyedWrite bool
}

// watchPrimaryTrailer marks the call keyed and has the primary's trailer written
// where its verdict can read it: where the caller asked for it, else into
// ownTrailer, through an option added to a copy of the caller's options.
func (p *grpcAttempts) watchPrimaryTrailer() {
	p.keyed = true
	if p.primaryTrailer = callerTrailer(p.opts); p.primaryTrailer == nil {
		p.primaryTrailer = &p.ownTrailer
		p.opts = append(p.opts[:len(p.opts):len(p.opts)], grpc.Trailer(&p.ownTrailer))
	}
}

// trailer returns the trailer copy n received, when it is known.
func (p *grpcAttempts) trailer(n int) metadata.MD {
	if n == 0 {
		if p.primaryTrailer == nil {
			return nil
		}
		return *p.primaryTrailer
	}
	if hc := p.hedges[n]; hc != nil {
		return hc.trailer
	}
	return nil
}

// hedgeCall is what one hedge sends and writes to instead of the caller's variables.
type hedgeCall struct {
	req     any           // a copy of the caller's request
	reply   proto.Message // made as the hedge is sent
	opts    []grpc.CallOption
	header  metadata.MD
	trailer metadata.MD
	peer    peer.Peer
}

func (p *grpcAttempts) prepare(int) error { return nil }
func (p *grpcAttempts) abandon(int)       {}

func (p *grpcAttempts) send(ctx context.Context, n int, _ record.Attempt) (struct{}, error) {
	if n == 0 {
		return struct{}{}, p.invoker(ctx, p.method, p.req, p.reply, p.cc, p.opts...)
	}
	hc := p.hedges[n]
	// Made here, not under the call's lock: New is the reply type's code.
	hc.reply = p.replyType.New().Interface()
	return struct{}{}, p.invoker(withAttempt(ctx, n, p.cfg.markOf(n, p.keyedWrite)), p.method, hc.req, hc.reply, p.cc, hc.opts...)
}

// ready makes what hedge n sends of the caller's: its own call options, and a copy
// of the caller's request message (a request that is no proto.Message is shared).
// It runs under the call's lock while the call is undecided ([readier]): a hedge
// still running once the call has returned (a loser, its interceptors, grpc-go's
// marshalling) reads its own copies, not the message or options the caller may
// change and send again by then. Its reply is made as it is sent.
func (p *grpcAttempts) ready(_ context.Context, n int) {
	hc := newHedgeCall(p.opts)
	hc.req = p.req
	if m, ok := p.req.(proto.Message); ok {
		hc.req = proto.Clone(m)
	}
	p.hedges[n] = hc
}

// newHedgeCall returns a hedge's own call options: the caller's, with the header,
// trailer and peer written into the hedge's instead. A hedge always asks for the
// trailer: it says whether the server refused the hedge for lack of budget.
func newHedgeCall(opts []grpc.CallOption) *hedgeCall {
	hc := &hedgeCall{}
	hc.opts = make([]grpc.CallOption, len(opts), len(opts)+1)
	trailer := false
	for i, o := range opts {
		switch o.(type) {
		case grpc.HeaderCallOption, *grpc.HeaderCallOption:
			o = grpc.Header(&hc.header)
		case grpc.TrailerCallOption, *grpc.TrailerCallOption:
			o, trailer = grpc.Trailer(&hc.trailer), true
		case grpc.PeerCallOption, *grpc.PeerCallOption:
			o = grpc.Peer(&hc.peer)
		}
		hc.opts[i] = o
	}
	if !trailer {
		hc.opts = append(hc.opts, grpc.Trailer(&hc.trailer))
	}
	return hc
}

// withMark returns ctx with the chain rule's mark in its outgoing metadata. (A
// second hedging layer nested above would add a second value: the server reads the
// first, and both say the same.)
func withMark(ctx context.Context) context.Context { return attempts.WithMark(ctx) }

// withAttempt returns ctx with grpc-previous-rpc-attempts set for hedge n, and the
// chain rule's mark set to mark (none when empty). A layer above (retry) may have
// counted attempts already: n adds to its count, replacing its value rather than
// sending two.
func withAttempt(ctx context.Context, n int, mark string) context.Context {
	md, ok := metadata.FromOutgoingContext(ctx) // a copy of its own
	if !ok {
		md = metadata.MD{}
	}
	k := 0
	if vs := md.Get(attempts.Key); len(vs) > 0 {
		k = attempts.Parse(vs[len(vs)-1]) // the nearest layer above appended the last
	}
	md.Set(attempts.Key, attempts.Format(k+n))
	if mark != "" {
		md.Set(attempts.CoveredKey, mark)
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// adopt copies what hedge n received into the caller's reply and call options. The
// primary has returned: nothing else writes to them.
func (p *grpcAttempts) adopt(n int) {
	hc := p.hedges[n]
	if hc == nil {
		return
	}
	proto.Reset(p.reply)
	proto.Merge(p.reply, hc.reply)
	for _, o := range p.opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			setMD(o.HeaderAddr, hc.header)
		case *grpc.HeaderCallOption:
			setMD(o.HeaderAddr, hc.header)
		case grpc.TrailerCallOption:
			setMD(o.TrailerAddr, hc.trailer)
		case *grpc.TrailerCallOption:
			setMD(o.TrailerAddr, hc.trailer)
		case grpc.PeerCallOption:
			setPeer(o.PeerAddr, &hc.peer)
		case *grpc.PeerCallOption:
			setPeer(o.PeerAddr, &hc.peer)
		}
	}
}

func setMD(dst *metadata.MD, md metadata.MD) {
	if dst != nil {
		*dst = md
	}
}

func setPeer(dst, p *peer.Peer) {
	if dst != nil {
		*dst = *p
	}
}

// verdict classifies a gRPC attempt's outcome. A local refusal (an error matching
// deadline.ErrInsufficientBudget: propagate's floor), a hedge whose trailer
// carries a negative grpc-retry-pushback-ms (a server's refusal for lack of budget)
// and, on a keyed call, any copy the server's deduplication answered ABORTED with a
// positive pushback (another copy holds the key) are refusals; the non-fatal codes
// fire the next hedge; codes that judge the request itself (INVALID_ARGUMENT,
// NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED, UNAUTHENTICATED,
// FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED, other ABORTED) are answers; the
// others are this copy's failures.
func (p *grpcAttempts) verdict(n int, _ struct{}, err error) verdict {
	if err == nil {
		return success
	}
	if errors.Is(err, deadline.ErrInsufficientBudget) {
		return refused
	}
	if n > 0 {
		if vs := p.trailer(n).Get(pushback.Key); len(vs) > 0 && pushback.Refuses(vs[0]) {
			return refused
		}
	}
	code := status.Code(err)
	if code == codes.Aborted && p.keyed && grpcDedupConflict(p.trailer(n)) {
		return refused
	}
	return p.cfg.codeVerdict(code)
}

// codeVerdict is the verdict of a failed copy's gRPC code: the non-fatal codes fire
// the next hedge; the codes that judge the request itself are answers; the others
// are the copy's failures.
func (c *config) codeVerdict(code codes.Code) verdict {
	if slices.Contains(c.nonFatalGRPC, code) {
		return nonFatal
	}
	switch code {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied, codes.Unauthenticated,
		codes.FailedPrecondition, codes.OutOfRange, codes.Unimplemented, codes.Aborted:
		return answer
	}
	return failure
}

func (p *grpcAttempts) failure(_ struct{}, err error) error { return err }

func (p *grpcAttempts) discard(_ struct{}, _ error, cancel context.CancelFunc) { cancel() }

// grpcIdempotent reports whether method (whose target is t, nil when too many
// targets are known) is declared idempotent (declared: by the client using h), and
// else whether the call is a keyed write: its outgoing metadata carries an
// idempotency-key.
func (h *Hedger) grpcIdempotent(ctx context.Context, t *target, method string, declared bool) (idem, keyedWrite bool) {
	if declared || t != nil && t.idempotent || t == nil && h.declaredIdempotent(method) {
		return true, false
	}
	return false, idempotency.Keyed(metadata.ValueFromOutgoingContext(ctx, idempotency.Key))
}

// declaredIdempotent reports whether method is declared idempotent, by
// [WithIdempotentMethods] or in its descriptor. [Hedger.target] remembers the answer.
func (h *Hedger) declaredIdempotent(method string) bool {
	return h.cfg.idempotent[method] || idempotency.Declared(method)
}
