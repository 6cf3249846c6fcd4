package attempts

import (
	"context"
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
