package sleep

import (
	"context"
	"testing"
	. "time" // time's Sleep, called by its bare name: the analyzer resolves it by type
)

// A test's fake server that sleeps through its caller plays a slow peer on purpose.
func slowPeer(ctx context.Context) error {
	Sleep(10 * Millisecond)
	return nil
}

func TestSlow(t *testing.T) { _ = slowPeer(t.Context()) }
