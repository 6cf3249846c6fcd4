package dedup

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/deadlinekit/deadlinekit/deadline"
)

// What the gRPC and connect halves share to decide what a unary answer is, as its
// caller receives it, and whether it is kept.

// wireStatus is the status grpc-go sends for a handler's error: the error's own
// status when it has one, else status.FromContextError's reading of it
// (DeadlineExceeded for a context deadline or a [*deadline.BudgetError], Canceled
// for a cancellation, Unknown with the error's text for anything else).
func wireStatus(err error) *status.Status {
	if st, ok := status.FromError(err); ok {
		return st
	}
	return status.FromContextError(err)
}

// unfinished reports whether an answer with code, for the handler's error err, says
// the handler gave up for lack of time or because its caller left, and so releases
// the key: DeadlineExceeded or Canceled, or Unknown (an error without a code, as
// connect-go's adapter reads it) whose chain holds a context error or
// [deadline.ErrInsufficientBudget] (what shortcircuit.Check returns). connect-go
// answers a context error DeadlineExceeded or Canceled, and the stack's guard a
// budget refusal DeadlineExceeded, whatever the reading here.
func unfinished(code codes.Code, err error) bool {
	switch code {
	case codes.DeadlineExceeded, codes.Canceled:
		return true
	case codes.Unknown:
		return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
			errors.Is(err, deadline.ErrInsufficientBudget)
	}
	return false
}

// setStatus puts st, an error's status, in a as it is stored: marshalled
// google.rpc.Status, details included.
func (a *grpcAnswer) setStatus(st *status.Status) {
	a.status, _ = proto.Marshal(st.Proto())
	a.msgName, a.msg = "", nil
}

// size is what a keeps in a store, counted against [WithMaxResponseSize]: the
// message, the keys and values of the header and trailer metadata, and the
// marshalled status.
func (a *grpcAnswer) size() int {
	return len(a.msgName) + len(a.msg) + mdSize(a.header) + mdSize(a.trailer) + len(a.status)
}

func mdSize(md metadata.MD) int {
	n := 0
	for k, vs := range md {
		n += len(k)
		for _, v := range vs {
			n += len(v)
		}
	}
	return n
}

// setMessage puts m in a as it is stored, marshalled, or, when m cannot be
// marshalled, the status its caller gets instead, which it returns: Internal, with
// the framework's text (prefix: grpc-go's "grpc: error while marshaling: ",
// connect-go's "marshal message: ") and the reason.
func (a *grpcAnswer) setMessage(m proto.Message, prefix string) *status.Status {
	b, err := proto.Marshal(m)
	if err != nil {
		st := status.New(codes.Internal, prefix+err.Error())
		a.setStatus(st)
		return st
	}
	a.msgName, a.msg = string(m.ProtoReflect().Descriptor().FullName()), b
	return nil
}

// keepGRPC completes t's lease with a, or with the record of an answer not kept
// when a is not storable or larger than [WithMaxResponseSize] (everything stored
// counts: [grpcAnswer.size]), code being the answer's status.
func (c *core) keepGRPC(ctx context.Context, t *ticket, a *grpcAnswer, storable bool, code codes.Code) {
	size := a.size()
	notKept := func() []byte { return encodeNotKept(int(code), size) }
	if storable && size <= c.c.maxResponse {
		c.complete(ctx, t, encodeGRPC(a), notKept)
	} else {
		c.complete(ctx, t, notKept(), nil)
	}
	c.report(ctx, outFirst, t)
}
