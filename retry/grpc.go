package retry

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/internal/attempts"
	"github.com/deadlinekit/deadlinekit/internal/idempotency"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/otelattr"
)

// GRPCAttempt is what a [GRPCClassifier] sees of one failed attempt.
type GRPCAttempt struct {
	// Method is the full method name ("/pkg.Service/Method").
	Method string
	// Err is the attempt's error and Status its gRPC status (never nil for an error).
	Err    error
	Status *status.Status
	// Trailer is the attempt's trailer metadata (grpc-retry-pushback-ms).
	Trailer metadata.MD
	// AttemptTimedOut reports whether this layer's per-attempt timeout
	// ([WithAttemptTimeout]) ended the attempt while the call's context was still live.
	AttemptTimedOut bool
	// Idempotent reports whether the call may safely run twice: its method is declared
	// idempotent ([WithIdempotentMethods], or idempotency_level NO_SIDE_EFFECTS or
	// IDEMPOTENT in its descriptor), or it carries an idempotency-key that is not
	// blank. It is filled in for a DEADLINE_EXCEEDED attempt, the one case the
	// default classifier asks.
	Idempotent bool
	// CallEnded reports whether the call's own context had ended.
	CallEnded bool
}

// GRPCClassifier judges one failed attempt of a gRPC call. See
// [DefaultGRPCClassifier]. A successful attempt is always Answered.
type GRPCClassifier func(a GRPCAttempt) Decision

// DefaultGRPCClassifier is the classification of [UnaryClientInterceptor]:
//
//   - the call's context ended: Failed;
//   - UNAVAILABLE: Retryable;
//   - DEADLINE_EXCEEDED: Retryable only when the per-attempt timeout fired and the
//     call is idempotent or keyed ([GRPCAttempt].Idempotent: a timed-out attempt may
//     have run); whether the deadline has room is then the deadline rule's business;
//     else Failed;
//   - RESOURCE_EXHAUSTED: Retryable only with google.rpc.RetryInfo; else Answered (a
//     quota refusal);
//   - NOT_FOUND, ALREADY_EXISTS, INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE,
//     ABORTED, PERMISSION_DENIED, UNAUTHENTICATED: Answered (the downstream is up; the
//     request or the credentials are wrong, or, for ABORTED, a conflict to re-read and
//     decide);
//   - UNIMPLEMENTED, INTERNAL, UNKNOWN, DATA_LOSS, CANCELED and anything else: Failed.
//
// A Retryable failure carries the server's pushback: the grpc-retry-pushback-ms
// trailer if present, else RetryInfo's retry_delay. A negative or malformed one gives
// HasPushback with a negative Pushback: the layer does not retry. A DEADLINE_EXCEEDED
// that is Failed carries a negative grpc-retry-pushback-ms too: it is a guard's
// refusal (packages shortcircuit and propagate), and the call's stop reason says so.
//
// An attempt that a layer beneath refused before sending it, for lack of budget (a
// [*deadline.BudgetError], from package propagate's floor), never reaches the
// classifier: it is not a transport failure, and it is not retried.
func DefaultGRPCClassifier(a GRPCAttempt) Decision {
	if a.CallEnded {
		return Decision{Verdict: Failed, Reason: "the call's context ended"}
	}
	code := status.Code(a.Err)
	if a.Status != nil {
		code = a.Status.Code()
	}
	var d Decision
	switch code {
	case codes.OK:
		return Decision{Verdict: Answered}
	case codes.Unavailable:
		d = Decision{Verdict: Retryable, Reason: "UNAVAILABLE"}
	case codes.DeadlineExceeded:
		if !a.AttemptTimedOut {
			return refusedByServer(Decision{Verdict: Failed, Reason: "DEADLINE_EXCEEDED without a per-attempt timeout"}, a.Trailer.Get(pushback.Key))
		}
		if !a.Idempotent {
			return refusedByServer(Decision{Verdict: Failed, Reason: "per-attempt timeout on a call neither idempotent nor keyed: it may have run"}, a.Trailer.Get(pushback.Key))
		}
		d = Decision{Verdict: Retryable, Reason: "per-attempt timeout"}
	case codes.ResourceExhausted:
		if _, found, _ := pushback.RetryInfoDelay(a.Status); !found {
			return Decision{Verdict: Answered, Reason: "RESOURCE_EXHAUSTED without RetryInfo"}
		}
		d = Decision{Verdict: Retryable, Reason: "RESOURCE_EXHAUSTED with RetryInfo"}
	case codes.NotFound, codes.AlreadyExists, codes.InvalidArgument, codes.FailedPrecondition,
		codes.OutOfRange, codes.Aborted, codes.PermissionDenied, codes.Unauthenticated:
		return Decision{Verdict: Answered, Reason: code.String()}
	default:
		return Decision{Verdict: Failed, Reason: code.String()}
	}
	if p, found, err := pushback.FromGRPC(a.Status, a.Trailer); found {
		d = withPushback(d, p, err)
		d.doNotRetry = len(a.Trailer.Get(pushback.Key)) > 0 && pushback.Refuses(a.Trailer.Get(pushback.Key)[0])
	}
	return d
}

// grpcCallState is what a call through UnaryClientInterceptor allocates: the trailer
// each attempt writes, and room for the attempt's call options.
type grpcCallState struct {
	trailer metadata.MD
	opts    [4]grpc.CallOption
}

// UnaryClientInterceptor returns a gRPC client interceptor that retries failed
// attempts of unary calls, following the options and the package's rules (see the
// package documentation). One interceptor is one client: its calls share one
// [Budget] unless [WithBudget] says otherwise.
//
// Attempts after the first carry grpc-previous-rpc-attempts; a call with
// [WithIdempotencyKeys] carries the same idempotency-key on every attempt. Each
// attempt runs under [deadline.WithAttemptTimeout]; the grpc-timeout of each attempt
// is written by the layers beneath (package propagate, or grpc-go itself), never by
// this one. Do not combine it with grpc-go's own retry policy (service config): only
// one layer should retry.
//
// When the layer stops before its attempts ran out, the error wraps the last failure:
// a [*DeadlineError] has code DEADLINE_EXCEEDED, a context that ended gives
// CANCELED or DEADLINE_EXCEEDED, and the others ([*BudgetExhaustedError], a pushback
// over the cap) keep the last attempt's code.
func UnaryClientInterceptor(opts ...Option) grpc.UnaryClientInterceptor {
	c := newConfig(opts)
	if c.grpcClassifier == nil {
		c.grpcClassifier = DefaultGRPCClassifier
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) (err error) {
		ctx, call := otelattr.StartCall(ctx, otelattr.GRPC, method)
		// The trailer (for pushback) and the attempt's options in one allocation.
		cs := &grpcCallState{}
		defer func() {
			// The last attempt's pushback travels with the error, for a handler that
			// relays it (deadlinekit.FromGRPC) without capturing the trailer.
			if v := cs.trailer.Get(pushback.Key); err != nil && len(v) > 0 {
				err = &pushback.Error{Err: err, Value: v[0]}
			}
			call.End(err)
		}()
		l := loop[struct{}, grpcCall]{c: c, proto: otelattr.GRPC}
		l.begin(ctx)
		if c.keys != nil {
			if vs := metadata.ValueFromOutgoingContext(ctx, MetadataIdempotencyKey); !idempotency.Keyed(vs) {
				if key := c.newKey(); key != "" {
					ctx = withKey(ctx, key, len(vs) > 0)
				}
			}
		}
		opts := cs.opts[:0]
		if len(callOpts) >= len(cs.opts) {
			opts = make([]grpc.CallOption, 0, len(callOpts)+1)
		}
		opts = append(append(opts, callOpts...), grpc.Trailer(&cs.trailer))
		l.p = grpcCall{c: c, cs: cs, method: method, req: req, reply: reply, cc: cc, invoker: invoker, opts: opts}
		_, err = l.run(ctx)
		return err
	}
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
}

func (g grpcCall) send(actx context.Context, n int, _ bool) (struct{}, error, bool) {
	if n > 1 {
		actx = metadata.AppendToOutgoingContext(actx, attempts.Key, attempts.Format(n-1))
	}
	g.cs.trailer = nil
	return struct{}{}, g.invoker(actx, g.method, g.req, g.reply, g.cc, g.opts...), true
}

func (g grpcCall) replied(struct{}) bool { return len(g.cs.trailer.Get(pushback.Key)) > 0 }

func (g grpcCall) judge(ctx context.Context, _ struct{}, err error, timedOut bool) (Decision, error) {
	if err == nil {
		return Decision{Verdict: Answered}, nil
	}
	st, _ := status.FromError(err)
	a := GRPCAttempt{Method: g.method, Err: err, Status: st, Trailer: g.cs.trailer, AttemptTimedOut: timedOut, CallEnded: ctx.Err() != nil}
	if st.Code() == codes.DeadlineExceeded {
		a.Idempotent = g.c.grpcIdempotent(ctx, g.method)
	}
	return g.c.classifyGRPC(a), err
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

func (c *config) classifyGRPC(a GRPCAttempt) (d Decision) {
	defer func() {
		if r := recover(); r != nil {
			d = Decision{Verdict: Failed, Reason: "classifier panicked"}
		}
	}()
	return c.grpcClassifier(a)
}

// grpcStop gives the layer's own stop errors their gRPC code: DEADLINE_EXCEEDED for
// the deadline rule, the context's code when the context ended. Others keep the last
// attempt's code through Unwrap.
func grpcStop(ctx context.Context, err error) error {
	var de *DeadlineError
	if errors.As(err, &de) {
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

// withKey returns ctx with the idempotency key in its outgoing metadata, in place of
// the caller's blank one when blank.
func withKey(ctx context.Context, key string, blank bool) context.Context {
	if !blank {
		return metadata.AppendToOutgoingContext(ctx, MetadataIdempotencyKey, key)
	}
	md, _ := metadata.FromOutgoingContext(ctx) // a copy of its own
	md.Set(MetadataIdempotencyKey, key)
	return metadata.NewOutgoingContext(ctx, md)
}

// grpcIdempotent reports whether a call to method may safely run twice: declared by
// option, by the method's descriptor in the protobuf registry (package hedge reads
// it the same way), or made safe by an idempotency-key in the call's metadata.
func (c *config) grpcIdempotent(ctx context.Context, method string) bool {
	return c.idempotent[method] || idempotency.Keyed(metadata.ValueFromOutgoingContext(ctx, MetadataIdempotencyKey)) || idempotency.Declared(method)
}
