package chaintest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// checkLeaks fails t if it leaves goroutines behind.
func checkLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}
