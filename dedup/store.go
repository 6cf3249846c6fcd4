package dedup

import (
	"context"
	"errors"
	"time"
)

// State is the state of a key's record in a [Store].
type State uint8

const (
	// Absent: no record, or one whose lease or retention has ended.
	Absent State = iota
	// Running: a request holds the key's lease and its handler runs.
	Running
	// Done: the answer of the first request is stored.
	Done
)

func (s State) String() string {
	switch s {
	case Absent:
		return "absent"
	case Running:
		return "running"
	case Done:
		return "done"
	}
	return "State(?)"
}

// Entry is what a [Store] knows of one key.
type Entry struct {
	State State
	// Fingerprint identifies the request that holds or held the key (its method,
	// path and body). Empty when Absent.
	Fingerprint string
	// Left is the time until the record ends: the lease's end when Running, the end
	// of the retention when Done.
	Left time.Duration
	// Answer is the stored answer when Done, opaque to the store (dedup encodes and
	// decodes it). A store returns its own copy: the caller does not modify it.
	Answer []byte
}

// Lease is what a request asks for when it takes a key.
type Lease struct {
	// Token identifies this request's lease: Complete and Release act only while
	// the record's token is this one.
	Token string
	// Fingerprint is the request's, stored with the lease.
	Fingerprint string
	// TTL is how long the lease holds: the request's time left plus a margin. It is
	// always positive.
	TTL time.Duration
}

// ErrLeaseLost is what Complete and Release return when the key is no longer leased
// with the caller's token: the lease ended and another request took the key (or it
// is absent). Nothing was changed.
var ErrLeaseLost = errors.New("dedup: the lease on the key was lost")

// ErrAnswerTooLarge is what Complete may return, changing nothing, for an answer the
// store will not hold: the middleware then completes the lease with a small record
// saying the answer was not kept, so that a repeat is refused rather than run again.
var ErrAnswerTooLarge = errors.New("dedup: the answer is too large for the store")

// Store keeps the records of idempotency keys: one record per key (the key already
// holds the scope), either running (a lease) or done (an answer). Every method is
// safe for concurrent use, and each is bounded by its ctx: the middleware gives the
// request's deadline (completion and release: the lease's end). Any error other than
// ErrLeaseLost means the store cannot be reached: the middleware answers 503 /
// Unavailable.
//
// A Store on SQL is one table (key primary key, state, token, fingerprint, expires_at,
// answer) and five statements:
//
//   - Acquire: in one transaction, delete the key's row if it expired, then INSERT
//     (key, 'running', token, fingerprint, now+TTL) ON CONFLICT DO NOTHING; when
//     nothing was inserted, SELECT the row and return it (acquired false).
//   - Complete: UPDATE … SET state='done', answer=?, expires_at=now+retain WHERE
//     key=? AND state='running' AND token=?; zero rows: ErrLeaseLost.
//   - Release: DELETE … WHERE key=? AND state='running' AND token=?; zero rows:
//     ErrLeaseLost.
//   - Get: SELECT the row; an expired row is Absent.
//   - Wait: poll Get with a growing pause until the row is no longer running (see
//     [PollWait]), or LISTEN/NOTIFY where the database has them.
type Store interface {
	// Acquire takes the lease on key when no request holds it and no answer is
	// stored (an expired record counts as none): acquired is true. Otherwise it
	// returns the key's record (Running or Done) and changes nothing. Taking the
	// lease and reading the record are one atomic step.
	Acquire(ctx context.Context, key string, l Lease) (acquired bool, cur Entry, err error)
	// Complete turns the lease with token into the stored answer, kept for retain.
	// The store may keep answer itself: its caller does not touch it afterwards.
	Complete(ctx context.Context, key, token string, answer []byte, retain time.Duration) error
	// Release removes the lease with token, so that the next request with the key
	// runs.
	Release(ctx context.Context, key, token string) error
	// Get returns the key's record.
	Get(ctx context.Context, key string) (Entry, error)
	// Wait returns the key's record once it is no longer Running (completed,
	// released, or its lease ended), or ctx's error when ctx ends first. A record
	// that is not Running is returned at once.
	Wait(ctx context.Context, key string) (Entry, error)
}

// PollWait is a Wait for stores without notifications: it calls s.Get with a pause
// that starts at 1 ms and doubles up to 50 ms (never past the lease's end, never past
// ctx's deadline) until the record is no longer Running.
func PollWait(ctx context.Context, s Store, key string) (Entry, error) {
	pause := time.Millisecond
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		e, err := s.Get(ctx, key)
		if err != nil {
			// A client bounded by ctx may fail with its own words (a socket's i/o
			// timeout) when ctx ends, even a moment before ctx's timer marks it
			// done: Wait's contract is ctx's error.
			if err := ctx.Err(); err != nil {
				return Entry{}, err
			}
			if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
				return Entry{}, context.DeadlineExceeded
			}
		}
		if err != nil || e.State != Running {
			return e, err
		}
		d := min(pause, e.Left)
		if d <= 0 {
			d = time.Millisecond
		}
		if t == nil {
			t = time.NewTimer(d)
		} else {
			t.Reset(d)
		}
		select {
		case <-ctx.Done():
			return Entry{}, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}
