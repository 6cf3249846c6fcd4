package attempts

import (
	"context"
	"maps"
	"slices"
	"testing"

	"google.golang.org/grpc/metadata"
)

func TestOutgoing(t *testing.T) {
	forwarded := metadata.NewOutgoingContext(context.Background(), metadata.Pairs(Key, "2", "x-user", "a"))
	for _, c := range []struct {
		name string
		ctx  context.Context
		n    int
		want []string
	}{
		{"first attempt, nothing forwarded", context.Background(), 0, nil},
		{"retry, nothing forwarded", context.Background(), 1, []string{"1"}},
		{"first attempt, the caller's count forwarded", forwarded, 0, nil},
		{"retry, the caller's count forwarded", forwarded, 1, []string{"1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := Outgoing(c.ctx, c.n)
			if got := metadata.ValueFromOutgoingContext(ctx, Key); !slices.Equal(got, c.want) {
				t.Errorf("%s = %q; want %q", Key, got, c.want)
			}
			if c.ctx == forwarded && !slices.Equal(metadata.ValueFromOutgoingContext(ctx, "x-user"), []string{"a"}) {
				t.Error("the other forwarded metadata was lost")
			}
		})
	}
	if got := metadata.ValueFromOutgoingContext(forwarded, Key); !slices.Equal(got, []string{"2"}) {
		t.Errorf("the caller's context was changed: %q", got)
	}
}

// WithMark's metadata is what AppendToOutgoingContext's would be, whatever the
// context carried, and the metadata it shares is never changed by its readers.
func TestWithMark(t *testing.T) {
	bg := context.Background()
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{
		{"nothing", bg},
		{"user metadata", metadata.NewOutgoingContext(bg, metadata.Pairs("x-user", "a"))},
		{"empty metadata", metadata.NewOutgoingContext(bg, nil)},
		{"appended metadata", metadata.AppendToOutgoingContext(bg, "x-user", "a")},
		{"marked already", WithMark(bg)},
		{"marked above, then metadata", metadata.AppendToOutgoingContext(WithMark(bg), "x-user", "a")},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, _ := metadata.FromOutgoingContext(metadata.AppendToOutgoingContext(c.ctx, CoveredKey, CoveredValue))
			ctx := WithMark(c.ctx)
			got, ok := metadata.FromOutgoingContext(ctx)
			if !ok || !maps.EqualFunc(got, want, slices.Equal) {
				t.Errorf("outgoing metadata %v; want %v", got, want)
			}
			got[CoveredKey][0] = "changed"
			got.Append(CoveredKey, "more")
			if vs := metadata.ValueFromOutgoingContext(WithMark(bg), CoveredKey); !slices.Equal(vs, []string{CoveredValue}) {
				t.Errorf("a reader changed the shared mark: %q", vs)
			}
		})
	}
}

func TestHasOutgoing(t *testing.T) {
	if outgoingKey == nil {
		t.Fatal("the outgoing metadata's key was not learnt: WithMark always appends")
	}
	bg := context.Background()
	if HasOutgoing(bg) {
		t.Error("HasOutgoing(Background) = true")
	}
	if HasOutgoing(metadata.NewIncomingContext(bg, metadata.Pairs("a", "b"))) {
		t.Error("incoming metadata taken for outgoing")
	}
	for _, ctx := range []context.Context{metadata.NewOutgoingContext(bg, nil), metadata.AppendToOutgoingContext(bg, "a", "b"), WithMark(bg)} {
		if !HasOutgoing(context.WithValue(ctx, otherKey{}, 1)) {
			t.Errorf("HasOutgoing(%v) = false", ctx)
		}
	}
}

type otherKey struct{}

// The mark of a call with no outgoing metadata costs one allocation: the context.
func TestWithMarkAllocations(t *testing.T) {
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() { _ = WithMark(ctx) }); n > 1 {
		t.Errorf("WithMark of a context without metadata: %v allocations; want 1", n)
	}
}
