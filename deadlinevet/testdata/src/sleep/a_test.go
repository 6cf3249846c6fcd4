package sleep

import (
	"context"
	"testing"
	"time"
)

// A test's fake server that sleeps through its caller plays a slow peer on purpose.
func slowPeer(ctx context.Context) error {
	time.Sleep(10 * time.Millisecond)
	return nil
}

func TestSlow(t *testing.T) { _ = slowPeer(t.Context()) }
