package deadlinekit

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/internal/idempotency"
)

// outgoingKeyError is the refusal of a call whose outgoing idempotency-key metadata
// (a key the handler forwarded from its caller, say) dedup would refuse, or grpc-go
// could not send (a character outside ASCII: grpc-go's own refusal is Internal):
// InvalidArgument with [dedup.ParseKey]'s reason, which names the character. Nil for
// a call without a key, or with a well-formed one.
func outgoingKeyError(ctx context.Context) error {
	vs := metadata.ValueFromOutgoingContext(ctx, idempotency.Key)
	if len(vs) == 0 || (len(vs) == 1 && !idempotency.Keyed(vs)) {
		return nil // no key: a blank one is none
	}
	if _, err := dedup.ParseKey(vs); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

// unaryKeyCheck refuses, before any layer sends it, a unary call whose outgoing key
// is malformed ([outgoingKeyError]).
func unaryKeyCheck(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if err := outgoingKeyError(ctx); err != nil {
		return err
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// streamKeyCheck is [unaryKeyCheck] for streams.
func streamKeyCheck(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if err := outgoingKeyError(ctx); err != nil {
		return nil, err
	}
	return streamer(ctx, desc, cc, method, opts...)
}
