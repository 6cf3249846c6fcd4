package propagate

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/attempts"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/internal/record"
)

// UnaryClientInterceptor returns a client interceptor that derives each call's context
// from the caller's following the options ([WithReserve], [WithReserveFraction],
// [WithMaxPerHop], [WithFloor], [WithDefaultTimeout]); grpc-go then writes
// grpc-timeout from that context, so what goes downstream is what is really left. A
// call with no time left, or less than the floor, fails with codes.DeadlineExceeded
// without being sent; the error also matches deadline.ErrInsufficientBudget under
// errors.Is.
//
// Each call also carries the level of its context (package criticality) in the
// metadata deadlinekit-criticality, on every attempt, as [NewTransport] writes it:
// nothing for the default level, critical.
//
// grpc-go encodes grpc-timeout itself and rounds up to its unit; in the units it picks
// (nanoseconds below 100 ms, microseconds below 100 s) that is at most one microsecond
// for budgets under 100 s.
func UnaryClientInterceptor(opts ...Option) grpc.UnaryClientInterceptor {
	c := newConfig(opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		ctx, call := record.StartCall(ctx, record.GRPC, method)
		return call.Unary(func() error {
			child, cancel, err := c.clientContext(ctx)
			if err != nil {
				return err
			}
			defer cancel()
			return invoker(withLevelMetadata(child), method, req, reply, cc, callOpts...)
		})
	}
}

// StreamClientInterceptor is the streaming form of [UnaryClientInterceptor]. When the
// options shorten the deadline, the derived context lives until the stream ends, as
// grpc-go ends it: an error (io.EOF included) from RecvMsg, or, for a stream whose
// server sends one message (client streaming), the RecvMsg that returns it; or until
// its own deadline passes. The stream's call span ([record.StartCall]), when this
// layer starts it, ends with the stream in the same way.
func StreamClientInterceptor(opts ...Option) grpc.StreamClientInterceptor {
	c := newConfig(opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		ctx, call := record.StartCall(ctx, record.GRPC, method)
		child, cancel, err := c.clientContext(ctx)
		if err != nil {
			call.End(err)
			return nil, err
		}
		s, err := streamer(withLevelMetadata(child), desc, cc, method, callOpts...)
		if err != nil {
			cancel()
			call.End(err)
			return nil, err
		}
		if child == ctx && !call.Owner() {
			return s, nil
		}
		return &cancelStream{ClientStream: s, cancel: cancel, call: call, single: !desc.ServerStreams}, nil
	}
}

func (c *config) clientContext(ctx context.Context) (context.Context, context.CancelFunc, error) {
	child, cancel, err := c.policy.Derive(ctx)
	if err != nil {
		be := new(deadline.BudgetError)
		if errors.As(err, &be) {
			return ctx, cancel, budgetStatus(be)
		}
		return ctx, cancel, err
	}
	left, has := deadline.Remaining(child)
	if has && left <= 0 {
		cancel()
		return ctx, cancel, budgetStatus(&deadline.BudgetError{Remaining: left, Needed: c.policy.Floor})
	}
	if has {
		record.BudgetSent(child, left)
	}
	return child, cancel, nil
}

// cancelStream releases a stream's derived context when the stream ends.
// It also ends the stream's call span, when this layer started it.
type cancelStream struct {
	grpc.ClientStream
	cancel context.CancelFunc
	call   record.Call
	single bool // the server sends one message: the RecvMsg that returns it ends the stream
}

func (s *cancelStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	// grpc-go's RecvMsg of a stream that is not server-streaming reads the message
	// and then the end of the stream, so that a nil error there means it is over.
	if err != nil || s.single {
		s.cancel()
		if errors.Is(err, io.EOF) {
			s.call.End(nil)
		} else {
			s.call.End(err)
		}
	}
	return err
}

// statusError is a *deadline.BudgetError that grpc-go and status.FromError see as a
// gRPC status with codes.DeadlineExceeded.
type statusError struct {
	*deadline.BudgetError
}

func budgetStatus(be *deadline.BudgetError) error { return statusError{be} }

func (e statusError) Error() string { return "propagate: " + e.BudgetError.Error() }
func (e statusError) Unwrap() error { return e.BudgetError }
func (e statusError) GRPCStatus() *status.Status {
	return status.New(codes.DeadlineExceeded, e.Error())
}

// UnaryServerInterceptor returns a server interceptor that applies the server's rules
// to the deadline grpc-go already parsed from grpc-timeout: the budget is clamped to
// [WithMaxTimeout] (default 5 minutes); with no deadline, X-Envoy-Expected-Rq-Timeout-Ms
// is read when [WithTrustEnvoy] is set, and otherwise the default budget applies
// ([WithDefaultTimeout], default 30 s). A request that arrives with no time left is
// refused with codes.DeadlineExceeded without calling the handler, and the trailer
// grpc-retry-pushback-ms: -1, so that no retry layer (grpc-go's retry policy
// included) retries it: a retry could only arrive with less time. A malformed Envoy
// header is refused with codes.InvalidArgument (unless [WithIgnoreMalformed]).
//
// A trusted caller's deadlinekit-criticality puts its level on the context
// (criticality.From); two values, or one criticality.Parse refuses, are refused
// with codes.InvalidArgument naming it, unless [WithIgnoreMalformed]. An
// untrusted caller's ([WithTrustGRPC]) is ignored and removed from the incoming
// metadata.
//
// The handler finds the applied budget with [InboundFromContext]. A malformed
// grpc-timeout never reaches the interceptor: grpc-go refuses it itself (code
// Internal) and keeps the last of repeated values.
func UnaryServerInterceptor(opts ...Option) grpc.UnaryServerInterceptor {
	c := newConfig(opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, cancel, err := c.serverContext(ctx, false)
		if err != nil {
			if status.Code(err) == codes.DeadlineExceeded {
				_ = grpc.SetTrailer(ctx, doNotRetry)
			}
			return nil, err
		}
		defer cancel()
		return handler(ctx, req)
	}
}

// StreamServerInterceptor is the streaming form of [UnaryServerInterceptor], with the
// rules of streams: a stream that came without a deadline gets no default budget,
// and the caller's deadline is not clamped by [WithMaxTimeout]; both are bounded by
// [WithMaxStreamTimeout] only (default: no bound). A watch whose caller sent no
// deadline runs until one side ends it.
func StreamServerInterceptor(opts ...Option) grpc.StreamServerInterceptor {
	c := newConfig(opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, cancel, err := c.serverContext(ss.Context(), true)
		if err != nil {
			if status.Code(err) == codes.DeadlineExceeded {
				ss.SetTrailer(doNotRetry)
			}
			return err
		}
		defer cancel()
		return handler(srv, &serverStream{ServerStream: ss, ctx: ctx})
	}
}

type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *serverStream) Context() context.Context { return s.ctx }

const envoyMetadataKey = "x-envoy-expected-rq-timeout-ms"

// doNotRetry is the trailer of a refusal for lack of time: grpc-retry-pushback-ms
// (gRPC A6) -1, "do not retry".
var doNotRetry = metadata.Pairs(pushback.Key, pushback.DoNotRetry)

func (c *config) serverContext(ctx context.Context, stream bool) (context.Context, context.CancelFunc, error) {
	trusted := c.trustGRPC == nil || c.trustGRPC(ctx)
	covered := false
	if !trusted {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			md = md.Copy()
			delete(md, envoyMetadataKey)
			delete(md, attempts.Key)
			delete(md, attempts.CoveredKey)
			delete(md, criticality.MetadataKey)
			ctx = metadata.NewIncomingContext(ctx, md)
		}
	} else {
		// A layer above may send this call again: its handler's calls are not
		// hedged (the chain rule, package hedge). The mark goes on the context with
		// the Inbound.
		covered = coveredGRPC(ctx)
	}
	ctx, err := c.inboundLevel(ctx, metadata.ValueFromIncomingContext(ctx, criticality.MetadataKey))
	if err != nil {
		return ctx, nil, status.Error(codes.InvalidArgument, "propagate: "+err.Error())
	}
	var envoy []string
	if c.trustEnvoy { // else never read: a lookup of a key that is absent visits every key
		envoy = metadata.ValueFromIncomingContext(ctx, envoyMetadataKey)
	}
	return c.frameworkContext(ctx, SourceGRPCTimeout, envoy, stream, covered)
}

// coveredGRPC reports whether the incoming call of ctx is covered by a layer above
// (attempts.Covers): its mark, or, with none, its attempt count, read only then.
func coveredGRPC(ctx context.Context) bool {
	if mark := firstValue(ctx, attempts.CoveredKey); mark != "" {
		return attempts.Covers(mark, "")
	}
	return attempts.Covers("", firstValue(ctx, attempts.Key))
}

// frameworkContext applies the server's rules to a deadline that the framework
// (grpc-go, connect-go) read from the timeout header named by source and set on ctx
// itself: with none, the Envoy header's values envoy when trusted, else the default
// budget; then the clamp, and the refusal of a request with no time left. The
// framework's deadline stands unless the clamp cut it or none came. A stream gets no
// default budget and the stream maximum for a clamp. covered: the request is covered
// by a layer above (the chain rule), which the handler's context says.
func (c *config) frameworkContext(ctx context.Context, source string, envoy []string, stream, covered bool) (context.Context, context.CancelFunc, error) {
	var in Inbound
	if left, has := deadline.Remaining(ctx); has {
		in.Budget, in.Source = left, source
	} else if d, ok, err := c.envoyTimeout(envoy); err != nil {
		return ctx, nil, status.Error(codes.InvalidArgument, "propagate: "+err.Error())
	} else if ok {
		in.Budget, in.Source = d, SourceEnvoyTimeout
	} else if d := c.defaultBudget(stream); d > 0 {
		in.Budget, in.Source = d, SourceDefault
	} else {
		return withCovered(ctx, covered), noop, nil
	}
	c.clamp(&in, stream)
	if in.Budget <= 0 {
		record.Inbound(ctx, in.Budget, in.Source, in.Clamped)
		return ctx, nil, status.Error(codes.DeadlineExceeded, "propagate: request arrived with no time left ("+in.Source+": "+deadline.Format(in.Budget)+")")
	}
	cancel := noop
	if in.Source == SourceEnvoyTimeout || in.Source == SourceDefault || in.Clamped {
		ctx, cancel = context.WithTimeout(ctx, in.Budget)
	}
	record.Inbound(ctx, in.Budget, in.Source, in.Clamped)
	return withInbound(ctx, in, covered), cancel, nil
}

// envoyTimeout reads the Envoy header's values vs, when the proxy is trusted.
func (c *config) envoyTimeout(vs []string) (time.Duration, bool, error) {
	if !c.trustEnvoy {
		return 0, false, nil
	}
	switch {
	case len(vs) == 0:
		return 0, false, nil
	case len(vs) > 1:
		if c.ignoreMalformed {
			return 0, false, nil
		}
		return 0, false, malformed(HeaderEnvoyTimeout, vs[0], "header repeated")
	}
	d, err := DecodeEnvoyTimeout(vs[0])
	if err != nil {
		if c.ignoreMalformed {
			return 0, false, nil
		}
		return 0, false, err
	}
	return d, true, nil
}

func noop() {}

// firstValue is the first value of the incoming metadata key k, or "", read
// without a copy of the values.
func firstValue(ctx context.Context, k string) string { return attempts.FirstIncoming(ctx, k) }
