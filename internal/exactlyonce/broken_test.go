package exactlyonce_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit/dedup"
)

// takesOver is a broken store: a lease held by another request is taken anyway, as
// if the store ignored the running record's token.
type takesOver struct{ dedup.Store }

func (s takesOver) Acquire(ctx context.Context, key string, l dedup.Lease) (bool, dedup.Entry, error) {
	got, e, err := s.Store.Acquire(ctx, key, l)
	if err == nil && !got && e.State == dedup.Running {
		return true, dedup.Entry{}, nil
	}
	return got, e, err
}

// othersAnswer is a broken store: a stored answer is answered with the answer last
// stored under another key.
type othersAnswer struct {
	dedup.Store
	mu   sync.Mutex
	last map[string][]byte // the answer last read, by kind byte
	keys map[string]string
}

func (s *othersAnswer) swap(key string, e dedup.Entry) dedup.Entry {
	if e.State != dedup.Done || len(e.Answer) == 0 {
		return e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	kind := string(e.Answer[:1])
	prev, prevKey := s.last[kind], s.keys[kind]
	s.last[kind], s.keys[kind] = e.Answer, key
	if prev != nil && prevKey != key {
		e.Answer = prev
	}
	return e
}

func (s *othersAnswer) Acquire(ctx context.Context, key string, l dedup.Lease) (bool, dedup.Entry, error) {
	got, e, err := s.Store.Acquire(ctx, key, l)
	return got, s.swap(key, e), err
}

func (s *othersAnswer) Wait(ctx context.Context, key string) (dedup.Entry, error) {
	e, err := s.Store.Wait(ctx, key)
	return s.swap(key, e), err
}

// altersAnswer is a broken store: the last letter of every stored answer is read
// back in upper case.
type altersAnswer struct{ dedup.Store }

func alter(e dedup.Entry) dedup.Entry {
	if e.State != dedup.Done {
		return e
	}
	b := slices.Clone(e.Answer)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] >= 'a' && b[i] <= 'z' {
			b[i] -= 'a' - 'A'
			break
		}
	}
	e.Answer = b
	return e
}

func (s altersAnswer) Acquire(ctx context.Context, key string, l dedup.Lease) (bool, dedup.Entry, error) {
	got, e, err := s.Store.Acquire(ctx, key, l)
	return got, alter(e), err
}

func (s altersAnswer) Wait(ctx context.Context, key string) (dedup.Entry, error) {
	e, err := s.Store.Wait(ctx, key)
	return alter(e), err
}

// noScope is a broken store: every key is stored in one scope, whoever's it is.
type noScope struct{ dedup.Store }

func unscoped(key string) string {
	_, k := splitKey(key)
	return "0::" + k
}

func (s noScope) Acquire(ctx context.Context, key string, l dedup.Lease) (bool, dedup.Entry, error) {
	return s.Store.Acquire(ctx, unscoped(key), l)
}

func (s noScope) Complete(ctx context.Context, key, token string, answer []byte, retain time.Duration) error {
	return s.Store.Complete(ctx, unscoped(key), token, answer, retain)
}

func (s noScope) Release(ctx context.Context, key, token string) error {
	return s.Store.Release(ctx, unscoped(key), token)
}

func (s noScope) Get(ctx context.Context, key string) (dedup.Entry, error) {
	return s.Store.Get(ctx, unscoped(key))
}

func (s noScope) Wait(ctx context.Context, key string) (dedup.Entry, error) {
	return s.Store.Wait(ctx, unscoped(key))
}

// TestCheckerCatches runs short histories on deliberately broken stores: the
// checker must report the invariant each one breaks. The connect cases break the
// store of the connect replicas alone (the HTTP and gRPC ones keep the good one):
// the checker must report it on a connect execution or a connect answer, which it
// can only if connect's executions and answers are in the history as the others'.
func TestCheckerCatches(t *testing.T) {
	cases := []struct {
		name    string
		store   func() dedup.Store
		connect func(dedup.Store) dedup.Store // the connect replicas' store, from the shared one; nil: the same
		want    []string                      // one of these invariants must be reported
	}{
		{"takes a held lease", func() dedup.Store { return takesOver{dedup.NewMemoryStore()} }, nil,
			[]string{"executions of a key never overlap", "at most one execution per key, none after a completed one"}},
		{"answers another key's answer", func() dedup.Store {
			return &othersAnswer{Store: dedup.NewMemoryStore(), last: map[string][]byte{}, keys: map[string]string{}}
		}, nil, []string{"no answer crosses a scope or a key"}},
		{"alters the answer", func() dedup.Store { return altersAnswer{dedup.NewMemoryStore()} }, nil,
			[]string{"a replay is byte-equal to the execution's answer"}},
		{"connect takes a held lease", newMemory, func(s dedup.Store) dedup.Store { return takesOver{s} },
			[]string{"executions of a key never overlap", "at most one execution per key, none after a completed one"}},
		{"connect alters the answer", newMemory, func(s dedup.Store) dedup.Store { return altersAnswer{s} },
			[]string{"a replay is byte-equal to the execution's answer"}},
		{"connect ignores the scope", newMemory, func(s dedup.Store) dedup.Store { return noScope{s} },
			[]string{"no answer crosses a scope or a key"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := seed(t)
			vs, h := runHistoryWith(t, tc.store(), tc.connect, s, 400, 1)
			for _, v := range vs {
				if slices.Contains(tc.want, v.Invariant) && (tc.connect == nil || h.overConnect(v)) {
					t.Logf("caught, as it should be (seed %d):\n%s", s, h.report(v))
					return
				}
			}
			var got []string
			for _, v := range vs {
				got = append(got, v.Invariant)
			}
			t.Fatalf("seed %d: the checker did not report %q on a store that breaks it; it reported %d violations: %s",
				s, tc.want, len(vs), strings.Join(slices.Compact(slices.Sorted(slices.Values(got))), "; "))
		})
	}
}

func newMemory() dedup.Store { return dedup.NewMemoryStore() }

// overConnect reports whether v was seen over connect: its detail names a connect
// answer, or an execution it names ran on a connect replica.
func (h *history) overConnect(v violation) bool {
	if strings.Contains(v.Detail, "connect/") {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range strings.Fields(v.Detail) {
		if id, err := strconv.ParseInt(f, 10, 64); err == nil && h.execs[id] != nil && h.execs[id].Proto == "connect" &&
			strings.Contains(v.Detail, "exec "+f) {
			return true
		}
	}
	return false
}
