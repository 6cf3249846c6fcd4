package attempts

import (
	"context"
	"testing"

	"google.golang.org/grpc/metadata"
)

// FirstIncoming reads what metadata.ValueFromIncomingContext reads, without a copy.
func TestFirstIncoming(t *testing.T) {
	if incomingKey == nil {
		t.Fatal("the incoming metadata's key was not learnt")
	}
	bg := context.Background()
	in := func(md metadata.MD) context.Context { return metadata.NewIncomingContext(bg, md) }
	for _, c := range []struct {
		name string
		ctx  context.Context
		key  string
	}{
		{"no metadata", bg, CoveredKey},
		{"outgoing only", metadata.NewOutgoingContext(bg, metadata.Pairs(CoveredKey, "1")), CoveredKey},
		{"absent", in(metadata.Pairs("x-user", "a")), CoveredKey},
		{"present", in(metadata.Pairs(CoveredKey, "1")), CoveredKey},
		{"two values", in(metadata.Pairs(CoveredKey, "0", CoveredKey, "1")), CoveredKey},
		{"no value", in(metadata.MD{CoveredKey: {}}), CoveredKey},
		{"upper-case key in the metadata", in(metadata.MD{CoveredHeader: {"0"}}), CoveredKey},
		{"upper-case key asked", in(metadata.Pairs(Key, "2")), Header},
		{"under another value", context.WithValue(in(metadata.Pairs(Key, "3")), otherKey{}, 1), Key},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := ""
			if vs := metadata.ValueFromIncomingContext(c.ctx, c.key); len(vs) > 0 {
				want = vs[0]
			}
			if got := FirstIncoming(c.ctx, c.key); got != want {
				t.Errorf("FirstIncoming = %q; want %q", got, want)
			}
		})
	}
	ctx := in(metadata.Pairs(CoveredKey, "1"))
	if n := testing.AllocsPerRun(100, func() { _ = FirstIncoming(ctx, CoveredKey) }); n != 0 {
		t.Errorf("FirstIncoming: %v allocations; want 0", n)
	}
}
