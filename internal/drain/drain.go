// Package drain disposes of an HTTP response body that nobody will read: the body of
// an attempt that is retried, or of a hedged copy that lost. Reading what is left of
// it lets net/http put the connection back in its pool; but the read must be cheap,
// since the caller is waiting (a retry) or the connection is not worth much (a loser):
// a body that is large or slow is cut off and its connection dropped instead.
package drain

import (
	"context"
	"io"
	"sync"
	"time"
)

// The bounds of [Close]: what is left of a body is read up to Limit bytes, and for
// at most Timeout.
const (
	Limit   = 64 << 10
	Timeout = 100 * time.Millisecond
)

// Close reads what is left of body, up to [Limit] bytes, and closes it; then calls
// cancel, the cancel func of the request's context, when not nil. A body that stalls
// is given [Timeout]: then it is closed and cancel called at once, which ends the
// blocked read (net/http's response bodies end a Read when they are closed, and when
// their request's context is cancelled), so that a stalled body costs the caller
// Timeout, not its deadline. Close returns when the body is closed.
//
// Call it inline before sending another attempt, or in a goroutine (go
// drain.Close(body, cancel)) for a body whose answer is no longer waited for.
func Close(body io.ReadCloser, cancel context.CancelFunc) {
	end := sync.OnceFunc(func() {
		_ = body.Close()
		if cancel != nil {
			cancel()
		}
	})
	t := time.AfterFunc(Timeout, end)
	_, _ = io.CopyN(io.Discard, body, Limit)
	t.Stop()
	end()
}
