package retry

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/deadline"
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
		maxAttempts := c.maxAttempts
		var single otelattr.StopReason
		in := inboundFrom(ctx)
		if in != nil && in.retry && maxAttempts > 1 {
			maxAttempts, single = 1, otelattr.StopCallerRetries
		}
		if c.keys != nil {
			if vs := metadata.ValueFromOutgoingContext(ctx, MetadataIdempotencyKey); !idempotency.Keyed(vs) {
				if key := c.newKey(); key != "" {
					ctx = withKey(ctx, key, len(vs) > 0)
				}
			}
		}
		trailer := &cs.trailer
		attemptOpts := cs.opts[:0]
		if len(callOpts) >= len(cs.opts) {
			attemptOpts = make([]grpc.CallOption, 0, len(callOpts)+1)
		}
		attemptOpts = append(append(attemptOpts, callOpts...), grpc.Trailer(trailer))

		for n := 1; ; n++ {
			actx := ctx
			if n > 1 {
				actx = metadata.AppendToOutgoingContext(ctx, attempts.Key, attempts.Format(n-1))
			}
			var cancel context.CancelFunc
			if c.attemptTimeout > 0 {
				actx, cancel = deadline.WithAttemptTimeout(actx, c.attemptTimeout)
			}
			actx, att := otelattr.StartAttempt(actx, otelattr.GRPC, attemptKind(n), n)
			*trailer = nil
			var start time.Time
			if c.observer != nil {
				start = time.Now()
			}
			err := invoker(actx, method, req, reply, cc, attemptOpts...)
			var took time.Duration
			if c.observer != nil {
				took = time.Since(start)
			}
			timedOut := cancel != nil && err != nil && attemptTimedOut(ctx, actx, c.attemptTimeout)
			if cancel != nil {
				cancel()
			}
			if err == nil {
				c.budget.Deposit()
				c.report(ctx, att, Event{Attempt: n, Took: took, Decision: Decision{Verdict: Answered}, Action: Return}, maxAttempts, single)
				return nil
			}
			var d Decision
			if localRefusal(err) {
				// Refused beneath before anything was sent: not a transport failure,
				// and another attempt would have less time still. A retry's token
				// comes back.
				d = Decision{Verdict: Failed, Reason: "refused before sending, for lack of budget"}
				if n > 1 {
					c.budget.refund()
				}
			} else if ld, ok := c.localPushback(err, n); ok && len(trailer.Get(pushback.Key)) == 0 {
				d = ld
			} else {
				st, _ := status.FromError(err)
				a := GRPCAttempt{Method: method, Err: err, Status: st, Trailer: *trailer, AttemptTimedOut: timedOut, CallEnded: ctx.Err() != nil}
				if st.Code() == codes.DeadlineExceeded {
					a.Idempotent = c.grpcIdempotent(ctx, method)
				}
				d = c.classifyGRPC(a)
			}
			if d.Verdict != Retryable {
				if d.Verdict == Answered {
					c.budget.Deposit()
				}
				c.report(ctx, att, Event{Attempt: n, Took: took, Decision: d, Action: Return, Err: err}, maxAttempts, single)
				if in != nil && d.doNotRetry {
					in.gaveUp.Store(true)
				}
				return err
			}
			action, wait, stopErr := c.plan(ctx, n, maxAttempts, d, err)
			if action == Stop {
				stopErr = grpcStop(ctx, stopErr)
			}
			e := Event{Attempt: n, Took: took, Decision: d, Action: action, Wait: wait, Err: err}
			if action == Stop {
				e.Err = stopErr
			}
			c.report(ctx, att, e, maxAttempts, single)
			if action != Retry && in != nil && (maxAttempts > 1 || (d.HasPushback && d.Pushback < 0)) {
				in.gaveUp.Store(true)
			}
			switch action {
			case Return:
				return err
			case Stop:
				return stopErr
			}
			if serr := c.waitToRetry(ctx, n, wait, err); serr != nil {
				if in != nil {
					in.gaveUp.Store(true)
				}
				return grpcStop(ctx, serr)
			}
		}
	}
}

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
