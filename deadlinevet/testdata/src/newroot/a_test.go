package newroot

import (
	"context"
	"testing"
)

func TestRoot(t *testing.T) {
	ctx := context.Background()
	_ = call(ctx)
}

func BenchmarkRoot(b *testing.B) {
	_ = call(context.TODO())
}
