package exactlyonce_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// A replica process is dead somewhere between the kill being sent and its reaping,
// which may come much later on a loaded machine: a completion cut short by a kill
// sent within the lease was never stored, however late the process was reaped. CI
// (-race, loaded) saw the checker call a re-run after the lease a second execution:
// the execution had completed 620 ms before its lease ended, nothing of its key was
// ever stored, and its process was killed, as reaped, after the lease's end.
func TestAKillSentWithinTheLeaseCountsFromItsSending(t *testing.T) {
	h := newHistory()
	p := &execution{Scope: "a", Key: "k", Start: 0, End: 10 * time.Millisecond, LeaseEnd: 100 * time.Millisecond, Inc: 7}
	h.killSent[7], h.killed[7] = 90*time.Millisecond, 400*time.Millisecond
	e := &execution{Scope: "a", Key: "k", Start: 500 * time.Millisecond}
	if !h.neverStored(p, e) {
		t.Fatalf("a re-run at %v, after an execution that ended at %v within its lease (to %v) and whose process was sent its kill at %v (reaped at %v), is judged a second execution",
			e.Start, p.End, p.LeaseEnd, h.killSent[7], h.killed[7])
	}
	// A process that lived past the lease without storing is still caught.
	h.killSent[7], h.killed[7] = 300*time.Millisecond, 310*time.Millisecond
	if h.neverStored(p, e) {
		t.Fatalf("a re-run after an execution whose process was killed only after its lease (at %v) is allowed", h.killSent[7])
	}
}

// An execution whose completion the store held up past its lease (a store delay)
// lost its lease, and the key's next execution, once that lease ended, is no second
// run of a completed one; the next's own completion, stored before the first's
// found its lease lost, is not the first's (seen in CI under -race: exec 39000030
// stored at 19.640 s, exec 40000007's completion, called at 19.378 s, refused at
// 19.712 s, its lease ended at 19.590 s).
func TestAStoredCompletionIsNotTakenForAnEarlierExecutions(t *testing.T) {
	h := newHistory()
	first := &execution{ID: 1, Scope: "a", Key: "k", Start: 0, End: 100 * time.Millisecond, LeaseEnd: 310 * time.Millisecond}
	next := &execution{ID: 2, Scope: "a", Key: "k", Start: 340 * time.Millisecond, End: 360 * time.Millisecond, LeaseEnd: 30 * time.Second}
	h.saved[sk("a", "k")] = []time.Duration{362 * time.Millisecond}
	h.lost[sk("a", "k")] = []time.Duration{435 * time.Millisecond}
	var violations []string
	h.checkKey([]*execution{first, next}, func(inv, scope, key, format string, args ...any) {
		violations = append(violations, inv+": "+fmt.Sprintf(format, args...))
	})
	if len(violations) > 0 {
		t.Fatalf("violations %q", violations)
	}
	if first.Released == "" {
		t.Fatal("the first execution, whose completion found its lease lost, counts as completed")
	}
	// The first's own completion stored before a late retry of it found the lease
	// lost still counts as the first's: the next execution then ran twice.
	h = newHistory()
	first.Released, next.Released = "", ""
	h.saved[sk("a", "k")] = []time.Duration{150 * time.Millisecond}
	h.lost[sk("a", "k")] = []time.Duration{435 * time.Millisecond}
	violations = nil
	h.checkKey([]*execution{first, next}, func(inv, scope, key, format string, args ...any) {
		violations = append(violations, inv)
	})
	if !slices.Contains(violations, "at most one execution per key, none after a completed one") {
		t.Fatalf("violations %q; want the second execution of a completed key", violations)
	}
}

// A completion the fault store failed by injection is a failed completion like the
// store's own: dedup tries it again until its lease ends, and when no try lands a
// re-run after the lease is allowed. CI (-race, loaded) saw the checker call one a
// second execution: exec 16000013's completion was failed at 6.268 s, its process
// made no further try before its lease ended at 6.453 s, and the key ran again at
// 6.464 s.
func TestAnInjectedCompletionFailureIsAFailedCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		seed := uint64(1)
		for ; ; seed++ { // a seed whose first completion of the key fails
			if f, _ := newFaultStore(nil, newHistory(), seed, 1, 0).draw("complete", "1:a:k", false); f == "error" {
				break
			}
		}
		h := newHistory()
		s := newFaultStore(dedup.NewMemoryStore(), h, seed, 1, 0)
		p := &execution{Scope: "a", Key: "k", Start: 0, End: 10 * time.Millisecond, LeaseEnd: 100 * time.Millisecond}
		<-time.After(p.End)
		if err := s.Complete(t.Context(), "1:a:k", "token", []byte("answer"), time.Hour); !errors.Is(err, errInjected) {
			t.Fatalf("the completion returned %v, want the injected failure", err)
		}
		<-time.After(100 * time.Millisecond)
		e := &execution{Scope: "a", Key: "k", Start: h.since()}
		if !h.neverStored(p, e) {
			t.Fatalf("a re-run %v in, after a completion made at %v within the lease (to %v) that the fault store failed, is judged a second execution",
				e.Start, p.End, p.LeaseEnd)
		}
	})
}
