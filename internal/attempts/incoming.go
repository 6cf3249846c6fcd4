package attempts

import (
	"context"
	"strings"

	"google.golang.org/grpc/metadata"
)

// FirstIncoming returns the first value of the key k in the incoming gRPC
// metadata of ctx, or "": the value metadata.ValueFromIncomingContext(ctx, k)[0]
// would give (k itself, else a key equal to it under case folding), read in place
// rather than from the copy that function makes of the values.
func FirstIncoming(ctx context.Context, k string) string {
	if incomingKey == nil {
		if vs := metadata.ValueFromIncomingContext(ctx, k); len(vs) > 0 {
			return vs[0]
		}
		return ""
	}
	md, _ := ctx.Value(incomingKey).(metadata.MD)
	vs, ok := md[k]
	if !ok {
		for mk, mv := range md {
			if strings.EqualFold(mk, k) {
				vs = mv
				break
			}
		}
	}
	if len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// incomingKey is the key under which package metadata keeps a context's incoming
// metadata, learnt as [outgoingKey] is.
var incomingKey = func() any {
	p := &keyProbe{Context: context.Background()}
	metadata.FromIncomingContext(p)
	return p.key
}()
