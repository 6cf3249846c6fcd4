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

// WithMark returns ctx with the chain rule's mark ([CoveredKey]: [CoveredValue])
// added to its outgoing gRPC metadata, as metadata.AppendToOutgoingContext would add
// it. A context with no outgoing metadata (the usual call) gets the context value
// AppendToOutgoingContext would give it, made once and shared by every such call
// (its metadata is never written to: grpc-go reads outgoing metadata, and its
// readers get copies): one allocation (the context) instead of the append's four.
// The mark is held there as an appended pair, as the append holds it, not as a map:
// a later lookup of another key in the call's metadata (propagate's level, on every
// call) looks at one pair instead of walking a map.
func WithMark(ctx context.Context) context.Context {
	if HasOutgoing(ctx) || markOnlyValue == nil {
		return metadata.AppendToOutgoingContext(ctx, CoveredKey, CoveredValue)
	}
	return context.WithValue(ctx, outgoingKey, markOnlyValue)
}

// markOnlyValue is the context value under outgoingKey of a context without
// outgoing metadata to which metadata.AppendToOutgoingContext added the mark, taken
// from one such context; nil when the key was not learnt.
var markOnlyValue = func() any {
	if outgoingKey == nil {
		return nil
	}
	return metadata.AppendToOutgoingContext(context.Background(), CoveredKey, CoveredValue).Value(outgoingKey)
}()

// HasOutgoing reports whether ctx carries outgoing gRPC metadata (set by
// metadata.NewOutgoingContext or AppendToOutgoingContext), without the copy that
// metadata.FromOutgoingContext makes. It answers true when it cannot tell.
func HasOutgoing(ctx context.Context) bool {
	return outgoingKey == nil || ctx.Value(outgoingKey) != nil
}

// outgoingKey is the key under which package metadata keeps a context's outgoing
// metadata, learnt by asking it to read a context that records the key it is asked
// for (the key's type is unexported; any value of it is equal to any other).
var outgoingKey = func() any {
	p := &keyProbe{Context: context.Background()}
	metadata.FromOutgoingContext(p)
	return p.key
}()

// keyProbe is a context that records the first key whose value it is asked for.
type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Value(k any) any {
	if p.key == nil {
		p.key = k
	}
	return nil
}
