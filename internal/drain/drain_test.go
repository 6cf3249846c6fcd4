package drain_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/deadlinekit/deadlinekit/internal/drain"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// body counts what was read from it and whether it was closed.
type body struct {
	r      io.Reader
	read   int
	closed atomic.Int32
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read += n
	return n, err
}

func (b *body) Close() error {
	b.closed.Add(1)
	return nil
}

// A short body is read to its end (so that its connection can be reused), closed
// once, and the request's context released.
func TestCloseReadsAShortBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &body{r: strings.NewReader("overloaded")}
		var cancels atomic.Int32
		drain.Close(b, func() { cancels.Add(1) })
		if b.read != len("overloaded") || b.closed.Load() != 1 || cancels.Load() == 0 {
			t.Fatalf("read %d bytes, closed %d times, cancelled %d; want all of it, once, released", b.read, b.closed.Load(), cancels.Load())
		}
	})
}

// A large body is read up to Limit, no more, and closed.
func TestCloseStopsAtTheLimit(t *testing.T) {
	b := &body{r: bytes.NewReader(make([]byte, 10*drain.Limit))}
	drain.Close(b, nil)
	if b.read != drain.Limit || b.closed.Load() != 1 {
		t.Fatalf("read %d bytes, closed %d times; want %d, once", b.read, b.closed.Load(), drain.Limit)
	}
}

// stalled is a body whose Read blocks until it is closed, as a response body over a
// connection whose server sent the header and then nothing does.
type stalled struct {
	done   chan struct{}
	closed atomic.Int32
}

func (s *stalled) Read([]byte) (int, error) {
	<-s.done
	return 0, errors.New("read on closed body")
}

func (s *stalled) Close() error {
	if s.closed.Add(1) == 1 {
		close(s.done)
	}
	return nil
}

// A body that stalls is given Timeout, then the request's context is cancelled and
// the body closed, which ends the blocked read: a stalled body costs Timeout, not
// the caller's deadline. Inline (retry, no context of its own) and in a goroutine
// (hedge's loser, with its attempt's cancel).
func TestCloseGivesUpOnAStalledBody(t *testing.T) {
	for _, withCancel := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			s := &stalled{done: make(chan struct{})}
			var cancels atomic.Int32
			var cancel func()
			if withCancel {
				cancel = func() { cancels.Add(1) }
			}
			start := time.Now()
			done := make(chan struct{})
			go func() {
				drain.Close(s, cancel)
				close(done)
			}()
			<-done
			if took := time.Since(start); took != drain.Timeout {
				t.Errorf("cancel %v: gave up after %v; want %v", withCancel, took, drain.Timeout)
			}
			if s.closed.Load() != 1 {
				t.Errorf("cancel %v: closed %d times; want once", withCancel, s.closed.Load())
			}
			if withCancel && cancels.Load() == 0 {
				t.Error("the request's context was not cancelled")
			}
		})
	}
}
