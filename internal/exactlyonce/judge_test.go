package exactlyonce_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/dedup"
)

// slowFailingStore fails every completion after taking slow to answer, as a Redis
// that answers late after an outage fails one at the store's timeout.
type slowFailingStore struct {
	dedup.Store
	slow time.Duration
}

func (s slowFailingStore) Complete(ctx context.Context, key, token string, answer []byte, retain time.Duration) error {
	<-time.After(s.slow)
	return errors.New("redisstore: Redis did not answer within the store's timeout")
}

// A completion the store failed was not stored if it was made within the lease,
// however late the failure came back: a re-run once the lease ended is allowed. CI
// saw the checker call one a violation when Redis, slow after an outage, failed a
// completion made 400 ms before the lease's end at 10 ms after it.
func TestACompletionFailedLateCountsFromItsStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHistory()
		s := newFaultStore(slowFailingStore{slow: 300 * time.Millisecond}, h, 1, 0, 0)
		p := &execution{Scope: "a", Key: "k", Start: 0, End: 10 * time.Millisecond, LeaseEnd: 100 * time.Millisecond}
		<-time.After(p.End)
		if err := s.Complete(t.Context(), "1:a:k", "token", []byte("answer"), time.Hour); err == nil {
			t.Fatal("the store's failure was not returned")
		}
		<-time.After(100 * time.Millisecond)
		e := &execution{Scope: "a", Key: "k", Start: h.since()}
		if !h.neverStored(p, e) {
			t.Fatalf("a re-run %v in, after a completion made at %v within the lease (to %v) that the store failed at %v, is judged a second execution",
				e.Start, p.End, p.LeaseEnd, p.End+300*time.Millisecond)
		}
	})
}
