package retry

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/internal/attempts"
	"github.com/deadlinekit/deadlinekit/internal/idempotency"
	"github.com/deadlinekit/deadlinekit/internal/keychain"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/internal/record"
)

// grpcAttempt is what the gRPC classification sees of one failed attempt.
type grpcAttempt struct {
	err       error
	status    *status.Status // err's, never nil
	trailer   metadata.MD    // the attempt's (grpc-retry-pushback-ms)
	timedOut  bool           // this layer's per-attempt timeout ended the attempt
	idem      bool           // the call may safely run twice
	keyed     bool           // the call carries an idempotency-key
	callEnded bool           // the call's own context had ended
	// unsent: the attempt provably never left the client (grpc-go made no transport
	// stream for it; a framework's request wrote no header), so the server cannot
	// have run it.
	unsent bool
}

// classifyGRPC is the judgement of [UnaryClientInterceptor] on a failed attempt, as
// documented there. A Retryable failure carries the server's pushback: the
// grpc-retry-pushback-ms trailer if present, else RetryInfo's retry_delay. A
// DEADLINE_EXCEEDED that is Failed carries a negative grpc-retry-pushback-ms too, so
// that the call's stop reason says a guard refused.
func classifyGRPC(a grpcAttempt) decision {
	if a.callEnded {
		return decision{verdict: Failed, reason: "the call's context ended"}
	}
	code := a.status.Code()
	var d decision
	switch code {
	case codes.OK:
		return decision{verdict: Answered}
	case codes.Unavailable:
		if !a.idem && !a.unsent && !pushback.Unprocessed(a.trailer.Get(pushback.UnprocessedKey)) {
			// gRPC's own words: "it is not always safe to retry non-idempotent
			// operations". A call that reached a server may have done the work,
			// unless the server says its handler did not run.
			return refusedByServer(decision{verdict: Failed, reason: "UNAVAILABLE on a call that may not run twice, after it was sent"}, a.trailer.Get(pushback.Key))
		}
		d = decision{verdict: Retryable, reason: "UNAVAILABLE"}
	case codes.DeadlineExceeded:
		if !a.timedOut {
			return refusedByServer(decision{verdict: Failed, reason: "DEADLINE_EXCEEDED without a per-attempt timeout"}, a.trailer.Get(pushback.Key))
		}
		if !a.idem {
			return refusedByServer(decision{verdict: Failed, reason: "per-attempt timeout on a call neither idempotent nor keyed: it may have run"}, a.trailer.Get(pushback.Key))
		}
		d = decision{verdict: Retryable, reason: "per-attempt timeout"}
	case codes.ResourceExhausted:
		if _, found, _ := pushback.RetryInfoDelay(a.status); !found {
			return decision{verdict: Answered, reason: "RESOURCE_EXHAUSTED without RetryInfo"}
		}
		d = decision{verdict: Retryable, reason: "RESOURCE_EXHAUSTED with RetryInfo"}
	case codes.Aborted:
		if d, ok := dedupConflictGRPC(a); ok {
			return d
		}
		return decision{verdict: Answered, reason: code.String()}
	case codes.NotFound, codes.AlreadyExists, codes.InvalidArgument, codes.FailedPrecondition,
		codes.OutOfRange, codes.PermissionDenied, codes.Unauthenticated:
		return decision{verdict: Answered, reason: code.String()}
	default:
		return decision{verdict: Failed, reason: code.String()}
	}
	if p, found, err := pushback.FromGRPC(a.status, a.trailer); found {
		d = withPushback(d, p, err)
		d.doNotRetry = len(a.trailer.Get(pushback.Key)) > 0 && pushback.Refuses(a.trailer.Get(pushback.Key)[0])
	}
	return d
}

// dedupConflictGRPC judges an ABORTED on a keyed call: the server's deduplication
// (package dedup) saying the first call with this key still runs, and when to come
// back (a positive grpc-retry-pushback-ms). It is retried after that pushback, when
// the deadline allows, and then meets the first's stored answer. Any other ABORTED
// is the application's conflict: ok is false.
func dedupConflictGRPC(a grpcAttempt) (decision, bool) {
	if !a.keyed {
		return decision{}, false
	}
	v := a.trailer.Get(pushback.Key)
	if len(v) == 0 {
		return decision{}, false
	}
	p, err := pushback.ParseMs(v[0])
	if err != nil || p <= 0 {
		return decision{}, false
	}
	d := withPushback(decision{verdict: Retryable, reason: "ABORTED on a keyed call: the first with its key still runs"}, p, nil)
	d.conflict = true
	return d, true
}

// grpcCallState is what a call through UnaryClientInterceptor allocates: the trailer
// each attempt writes, and room for the attempt's call options. It is not reused: a
// hedging layer beneath may still be reading the options of a hedge it is starting
// when the call returns (the race detector found a pooled state overwritten under
// it).
type grpcCallState struct {
	trailer metadata.MD
	header  metadata.MD // the attempt's header metadata, for a keyed call (idempotent-replayed)
	opts    [5]grpc.CallOption
}

// UnaryClientInterceptor returns a gRPC client interceptor that retries failed
// attempts of unary calls. One interceptor is one client: its calls share one
// [Budget] unless [WithBudget] says otherwise.
//
// An attempt is retried when another one may succeed and resending does no harm:
//
//   - UNAVAILABLE, for a call that may safely run twice (see below); for any other
//     only when the attempt provably did not run: it never left the client (grpc-go
//     made no transport stream for it), or the server's trailer says its handler did
//     not run (deadlinekit-unprocessed: 1, as the toolkit's guard sends). An
//     UNAVAILABLE that a server answered may come from a handler that did the work
//     and then failed, or that relays its own downstream's failure;
//   - DEADLINE_EXCEEDED only when this layer's per-attempt timeout fired
//     ([WithAttemptTimeout]) and the call may safely run twice, since a timed-out
//     attempt may have run: its method is declared idempotent
//     ([WithIdempotentMethods], or idempotency_level NO_SIDE_EFFECTS or IDEMPOTENT in
//     its proto descriptor), or it carries an idempotency-key;
//   - RESOURCE_EXHAUSTED only with google.rpc.RetryInfo (without it, it is a quota
//     refusal).
//
// Nothing else is: not a call whose context ended, nor NOT_FOUND, ALREADY_EXISTS,
// INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE, ABORTED, PERMISSION_DENIED,
// UNAUTHENTICATED (the downstream is up: they are Answered and deposit into the
// budget), nor UNIMPLEMENTED, INTERNAL, UNKNOWN, DATA_LOSS, CANCELED. [WithClassifier]
// changes this judgement. A DEADLINE_EXCEEDED with grpc-retry-pushback-ms: -1 is a
// guard's refusal for lack of budget (packages shortcircuit and propagate): it is
// never retried, since a retry could only arrive with less time.
//
// Attempts after the first carry grpc-previous-rpc-attempts; a call with
// [WithIdempotencyKeys] carries the same idempotency-key on every attempt. Each
// attempt runs under [deadline.WithAttemptTimeout]; the grpc-timeout of each attempt
// is written by the layers beneath (package propagate, or grpc-go itself), never by
// this one. Do not combine it with grpc-go's own retry policy (service config): only
// one layer should retry.
//
// On a traced keyed call, the spans say what a deduping server answered, as for
// [NewTransport]: the replay marker (header metadata idempotent-replayed), an
// ABORTED conflict and its come-back, the key's hash.
//
// When the layer stops before its attempts ran out, it returns a [*StopError]: under
// the deadline rule with code DEADLINE_EXCEEDED, when the context ended CANCELED or
// DEADLINE_EXCEEDED; the others keep the last attempt's code.
func UnaryClientInterceptor(opts ...Option) grpc.UnaryClientInterceptor {
	c := newConfig(opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		ctx, call := record.StartCall(ctx, record.GRPC, method)
		return call.Unary(func() error { return c.unary(ctx, method, req, reply, cc, invoker, callOpts) })
	}
}

// unary is the interceptor's call, under ctx, the call's context.
func (c *config) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts []grpc.CallOption) (err error) {
	// The trailer (for pushback) and the attempt's options in one allocation.
	cs := &grpcCallState{}
	defer func() {
		// The last attempt's pushback travels with the error, for a handler that
		// relays it (deadlinekit.FromGRPC) without capturing the trailer.
		if err == nil {
			return
		}
		if v := cs.trailer.Get(pushback.Key); len(v) > 0 {
			err = &pushback.Error{Err: err, Value: v[0]}
		}
	}()
	l := loop[struct{}, grpcCall]{c: c, proto: record.GRPC, method: method}
	l.begin(ctx)
	ctx = c.withCallKey(ctx, method, false)
	opts := cs.opts[:0]
	if len(callOpts)+1 >= len(cs.opts) {
		opts = make([]grpc.CallOption, 0, len(callOpts)+2)
	}
	opts = append(append(opts, callOpts...), grpc.Trailer(&cs.trailer))
	key := metadata.ValueFromOutgoingContext(ctx, idempotency.Key)
	keyed := idempotency.Keyed(key)
	if keyed {
		record.IdempotencyKey(ctx, key[0])
		opts = append(opts, grpc.Header(&cs.header))
	}
	l.p = grpcCall{c: c, cs: cs, method: method, req: req, reply: reply, cc: cc, invoker: invoker, opts: opts, keyed: keyed}
	_, err = l.run(ctx)
	return err
}

// grpcCall is the gRPC adapter of one call: what each attempt is made from.
type grpcCall struct {
	c          *config
	cs         *grpcCallState
	method     string
	req, reply any
	cc         *grpc.ClientConn
	invoker    grpc.UnaryInvoker
	opts       []grpc.CallOption // the caller's, and the trailer's
	// keyed: the call's outgoing metadata carries an idempotency-key that is not
	// blank (keyedCall of the call's context), read once per call.
	keyed bool
}

func (g grpcCall) send(actx context.Context, n int, _ bool) (struct{}, error, bool) {
	actx = attempts.Outgoing(actx, n-1)
	g.cs.trailer, g.cs.header = nil, nil
	return struct{}{}, g.invoker(actx, g.method, g.req, g.reply, g.cc, g.opts...), true
}

func (g grpcCall) replied(struct{}) bool { return len(g.cs.trailer.Get(pushback.Key)) > 0 }

func (g grpcCall) judge(ctx context.Context, _ struct{}, err error, timedOut bool) outcome {
	if err == nil {
		return outcome{d: decision{verdict: Answered}}
	}
	st, _ := status.FromError(err)
	idem := g.c.idempotentCall(g.method, g.keyed)
	// grpc-go fills the trailer only for an attempt that got a transport stream: a
	// nil one is an attempt that never left the client.
	d := classifyGRPC(grpcAttempt{err: err, status: st, trailer: g.cs.trailer, timedOut: timedOut, idem: idem, keyed: g.keyed, callEnded: ctx.Err() != nil, unsent: g.cs.trailer == nil})
	return outcome{d: d, err: err, idempotent: idem}
}

func (grpcCall) discard(_ struct{}, cancel context.CancelFunc) {
	if cancel != nil {
		cancel()
	}
}

func (grpcCall) deliver(_ struct{}, err error, cancel context.CancelFunc) (struct{}, error) {
	if cancel != nil {
		cancel()
	}
	return struct{}{}, err
}

func (grpcCall) stopped(ctx context.Context, err error) error { return grpcStop(ctx, err) }

// answered is false: a gRPC failure is its status, which a stop error keeps.
func (grpcCall) answered(struct{}) bool { return false }

// dedup reads what a deduping server said of a keyed call's attempt: its replay
// marker (header metadata idempotent-replayed: true), a conflict (d.conflict).
func (g grpcCall) dedup(_ context.Context, _ struct{}, d decision) (record.DedupAnswer, bool) {
	if !g.keyed {
		return record.DedupAnswer{}, false
	}
	return dedupAnswer(g.cs.header.Get(idempotency.ReplayedKey), d), true
}

// dedupAnswer is the dedup answer of an attempt whose idempotent-replayed values
// are replayed, judged d.
func dedupAnswer(replayed []string, d decision) record.DedupAnswer {
	a := record.DedupAnswer{Replayed: len(replayed) > 0 && replayed[0] == "true", Conflict: d.conflict}
	if d.conflict {
		a.ComeBack = d.pushback
	}
	return a
}

func (g grpcCall) keep(v struct{}, cancel context.CancelFunc) (struct{}, bool) {
	g.discard(v, cancel)
	return v, false
}

// grpcStop gives the layer's own stop errors their gRPC code: DEADLINE_EXCEEDED for
// the deadline rule, the context's code when the context ended. Others keep the last
// attempt's code through Unwrap.
func grpcStop(ctx context.Context, err error) error {
	if se, ok := err.(*StopError); ok && se.deadlineRule() {
		return &statusError{err: err, code: codes.DeadlineExceeded}
	}
	if cerr := ctx.Err(); cerr != nil {
		return &statusError{err: err, code: status.FromContextError(cerr).Code()}
	}
	return err
}

// statusError is a stop error with the gRPC code it maps to.
type statusError struct {
	err  error
	code codes.Code
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// GRPCStatus lets status.FromError and status.Code report the mapped code.
func (e *statusError) GRPCStatus() *status.Status { return status.New(e.code, e.err.Error()) }

// withCallKey returns ctx with the call's idempotency key in its outgoing metadata
// when the layer chooses one ([config.callKey]): a new one for a call of a layer
// with [WithIdempotencyKeys] whose caller set none (or a blank one), a derived one
// in place of a forwarded inbound key. idem says the method may safely run twice.
// Every attempt of the call carries it.
func (c *config) withCallKey(ctx context.Context, method string, idem bool) context.Context {
	if c.keys == nil && keychain.From(ctx) == nil {
		return ctx // nothing to choose: what the caller set goes as it is
	}
	vs := metadata.ValueFromOutgoingContext(ctx, idempotency.Key)
	write := !idem && !c.idempotent[method] && !idempotency.Declared(method)
	if key := c.callKey(ctx, vs, write); key != "" {
		return withKey(ctx, key, len(vs) > 0)
	}
	return ctx
}

// withKey returns ctx with the idempotency key in its outgoing metadata, in place of
// the caller's (a blank one, or the forwarded inbound one) when it set one.
func withKey(ctx context.Context, key string, replace bool) context.Context {
	if !replace {
		return metadata.AppendToOutgoingContext(ctx, idempotency.Key, key)
	}
	md, _ := metadata.FromOutgoingContext(ctx) // a copy of its own
	md.Set(idempotency.Key, key)
	return metadata.NewOutgoingContext(ctx, md)
}

// grpcIdempotent reports whether a call to method may safely run twice: declared by
// option, by the method's descriptor in the protobuf registry (package hedge reads
// it the same way), or made safe by an idempotency-key in the call's metadata.
func (c *config) grpcIdempotent(ctx context.Context, method string) bool {
	return c.idempotentCall(method, keyedCall(ctx))
}

// idempotentCall is [config.grpcIdempotent] of a call whose idempotency-key was
// read already: keyed says it carries one.
func (c *config) idempotentCall(method string, keyed bool) bool {
	return c.idempotent[method] || keyed || idempotency.Declared(method)
}

// keyedCall reports whether the call of ctx carries an idempotency-key that is not
// blank in its outgoing metadata.
func keyedCall(ctx context.Context) bool {
	return idempotency.Keyed(metadata.ValueFromOutgoingContext(ctx, idempotency.Key))
}

// writes is 0: grpc-go and connect resend nothing by themselves that reached a server.
func (grpcCall) writes(struct{}) int { return 0 }
