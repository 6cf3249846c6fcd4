package attempts

import (
	"context"

	"google.golang.org/grpc/metadata"
)

// Outgoing returns ctx with its outgoing gRPC metadata holding one value of [Key]:
// n, the attempts sent before this one, or none for n = 0. A handler that forwards
// its incoming metadata (metadata.NewOutgoingContext(ctx, incoming)) forwards its
// caller's count with it; that count is not this call's, and appending beside it
// would send two values. Without a forwarded count it costs what an append does.
func Outgoing(ctx context.Context, n int) context.Context {
	if len(metadata.ValueFromOutgoingContext(ctx, Key)) == 0 {
		if n == 0 {
			return ctx
		}
		return metadata.AppendToOutgoingContext(ctx, Key, Format(n))
	}
	md, _ := metadata.FromOutgoingContext(ctx) // a copy of its own
	if n == 0 {
		delete(md, Key)
	} else {
		md.Set(Key, Format(n))
	}
	return metadata.NewOutgoingContext(ctx, md)
}
