package shortcircuit

import (
	"context"
	"errors"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

// doNotRetry is the trailer of a refusal for lack of budget: grpc-retry-pushback-ms
// (gRPC A6) -1, "do not retry", so that neither the toolkit's retry layers nor
// grpc-go's own retry policy retry it: a retry could only arrive with less time.
var doNotRetry = metadata.Pairs(pushback.Key, pushback.DoNotRetry)

// refusedUnrun is the trailer of a refusal for lack of budget made before the
// handler ran: "do not retry", and "the handler did not run".
var refusedUnrun = metadata.Pairs(pushback.Key, pushback.DoNotRetry, pushback.UnprocessedKey, pushback.Yes)

// UnaryServerInterceptor returns a gRPC interceptor that refuses a call with
// DeadlineExceeded, before the handler runs, when the time left is below the floor or
// the deadline has passed. The status message states the time left and the floor, and
// the trailer grpc-retry-pushback-ms: -1 tells the caller's retry layers (grpc-go's
// retry policy included) not to retry it. The route key is the full method
// ("/package.Service/Method").
//
// A [*BudgetError] returned by the handler (from [Check]) that is not already a gRPC
// status is answered as DeadlineExceeded, with the same trailer; other errors pass
// through unchanged.
func UnaryServerInterceptor(opts ...Option) grpc.UnaryServerInterceptor {
	g := newGuard(opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		var t ticket
		if !g.admit(ctx, fullMethod(info), &t) {
			md, st := refusalStatus(&t)
			_ = grpc.SetTrailer(ctx, md)
			return nil, st
		}
		if g.tracks(&t) && keyedGRPC(ctx) {
			wk, kctx := g.hold(ctx, &t)
			return g.serveGRPC(kctx, req, &wk.t, handler)
		}
		return g.serveGRPC(ctx, req, &t, handler)
	}
}

// serveGRPC runs handler for a call the guard admitted with t, and ends t.
func (g *guard) serveGRPC(ctx context.Context, req any, t *ticket, handler grpc.UnaryHandler) (any, error) {
	if g.lim != nil {
		defer g.releaseOnPanic(t)
	}
	resp, err := handler(ctx, req)
	g.done(ctx, t, err == nil)
	if err != nil {
		var refused bool
		if refused, err = budgetStatus(err); refused {
			_ = grpc.SetTrailer(ctx, doNotRetry)
		}
	}
	return resp, err
}

// StreamServerInterceptor returns a gRPC interceptor that refuses a stream with
// DeadlineExceeded, before the handler runs, when the time left is below the floor or
// the deadline has passed. The floor is checked once, when the stream opens; the
// stream's duration (for the adaptive floor) and overrun run to the handler's return.
// Errors are mapped as by [UnaryServerInterceptor]. The concurrency options
// ([WithMaxConcurrency], [WithAdaptiveConcurrency], [WithQueue]) do not apply to
// streams: a stream's life is no service time to predict a wait from, and a few
// long-lived streams would hold every slot.
func StreamServerInterceptor(opts ...Option) grpc.StreamServerInterceptor {
	g := newGuard(append(opts[:len(opts):len(opts)], withoutLimit()))
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		var t ticket
		method := ""
		if info != nil {
			method = info.FullMethod
		}
		if !g.admit(ctx, method, &t) {
			md, st := refusalStatus(&t)
			ss.SetTrailer(md)
			return st
		}
		if g.lim != nil {
			defer g.releaseOnPanic(&t)
		}
		err := handler(srv, ss)
		g.done(ctx, &t, err == nil)
		if err != nil {
			var refused bool
			if refused, err = budgetStatus(err); refused {
				ss.SetTrailer(doNotRetry)
			}
		}
		return err
	}
}

// refusalStatus is the status and trailer of the refusal of t: DeadlineExceeded with
// "do not retry" for lack of time; ResourceExhausted with RetryInfo and
// grpc-retry-pushback-ms set to the predicted wait for an overloaded server;
// Canceled for a caller that left the queue. Each trailer says the handler did not
// run (deadlinekit-unprocessed: 1).
func refusalStatus(t *ticket) (metadata.MD, error) {
	if d, ok := t.comeBack(); ok {
		st := status.New(codes.ResourceExhausted, t.refusal())
		if with, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)}); err == nil {
			st = with
		}
		return metadata.Pairs(pushback.Key, strconv.FormatInt(int64(d/time.Millisecond), 10),
			pushback.UnprocessedKey, pushback.Yes), st.Err()
	}
	code := codes.DeadlineExceeded
	if t.decision == Canceled {
		code = codes.Canceled
	}
	return refusedUnrun, status.Error(code, t.refusal())
}

func fullMethod(info *grpc.UnaryServerInfo) string {
	if info == nil {
		return ""
	}
	return info.FullMethod
}

// budgetStatus maps a *BudgetError that is not a gRPC status to DeadlineExceeded,
// and reports whether it did: the answer is then a refusal for lack of budget.
func budgetStatus(err error) (refused bool, _ error) {
	var be *BudgetError
	if !errors.As(err, &be) {
		return false, err
	}
	if _, isStatus := status.FromError(err); isStatus {
		return false, err
	}
	return true, status.Error(codes.DeadlineExceeded, "shortcircuit: "+err.Error())
}
