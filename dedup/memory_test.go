package dedup_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/internal/storecheck"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
)

// memPost runs one keyed POST through h in-process.
func memPost(h http.Handler, key string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader("100"))
	req.Header.Set("Idempotency-Key", key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestMemoryStoreKeepsEveryAnswerBelowItsBound is bug 2 as a user meets it: 20 keys
// in a store bounded at 64 entries must all be replayed, none run again.
func TestMemoryStoreKeepsEveryAnswerBelowItsBound(t *testing.T) {
	store := dedup.NewMemoryStore(dedup.WithMaxEntries(64))
	var ran atomic.Int64
	h := dedup.NewMiddleware(store)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "charge ", ran.Add(1))
	}))
	first := map[string]string{}
	for i := range 20 {
		k := fmt.Sprint("key-", i)
		first[k] = memPost(h, k).Body.String()
	}
	var lost []string
	for i := range 20 {
		k := fmt.Sprint("key-", i)
		r := memPost(h, k)
		if r.Header().Get("Idempotent-Replayed") != "true" || r.Body.String() != first[k] {
			lost = append(lost, k)
		}
	}
	if st := store.Stats(); len(lost) > 0 || ran.Load() != 20 || st.Evicted != 0 {
		t.Fatalf("20 keys in a store of 64: %d answers lost %v, handler ran %d times (want 20), stats %+v",
			len(lost), lost, ran.Load(), st)
	}
}

var memLease = dedup.Lease{Token: "t", Fingerprint: "f", TTL: time.Minute}

// memFill acquires and completes n keys "k0" … in order, each with a 10-byte answer.
func memFill(t *testing.T, s *dedup.MemoryStore, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		k := fmt.Sprint("k", i)
		if ok, _, err := s.Acquire(ctx, k, memLease); !ok || err != nil {
			t.Fatalf("acquire %s: %v %v", k, ok, err)
		}
		if err := s.Complete(ctx, k, "t", []byte(fmt.Sprintf("%010d", i)), time.Hour); err != nil {
			t.Fatalf("complete %s: %v", k, err)
		}
	}
}

// TestMemoryStoreCompleteMakesNoRoom: Complete turns a running record into a done
// one; it adds no entry, so it evicts nothing for one.
func TestMemoryStoreCompleteMakesNoRoom(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{1, 2, 3, 40} {
		s := dedup.NewMemoryStore(dedup.WithMaxEntries(n))
		memFill(t, s, n-1)
		if ok, _, err := s.Acquire(ctx, "last", memLease); !ok || err != nil {
			t.Fatalf("bound %d: acquire of the last entry: %v %v", n, ok, err)
		}
		if err := s.Complete(ctx, "last", "t", []byte("x"), time.Hour); err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); st.Evicted != 0 || st.Entries != n {
			t.Errorf("bound %d, %d entries completed: stats %+v, want %d entries and no eviction", n, n, st, n)
		}
	}
}

// TestMemoryStoreEvictsTheOldestAnswer: at its bound, a new key evicts the oldest
// completed answer of the whole store, one per new key, whatever their shards.
func TestMemoryStoreEvictsTheOldestAnswer(t *testing.T) {
	ctx := context.Background()
	const n = 50
	s := dedup.NewMemoryStore(dedup.WithMaxEntries(n))
	memFill(t, s, n)
	for i := range 10 {
		k := fmt.Sprint("new", i)
		if ok, _, err := s.Acquire(ctx, k, memLease); !ok || err != nil {
			t.Fatalf("acquire %s at the bound: %v %v", k, ok, err)
		}
		if st := s.Stats(); st.Evicted != i+1 || st.Entries != n {
			t.Fatalf("after %d new keys: %+v", i+1, st)
		}
		for j := range n {
			e, _ := s.Get(ctx, fmt.Sprint("k", j))
			if want := j > i; (e.State == dedup.Done) != want {
				t.Fatalf("after %d new keys, k%d is %v: the oldest answers go first", i+1, j, e.State)
			}
		}
	}
}

// TestMemoryStoreBytesBound: bytes are the store's too; Complete evicts the oldest
// answers only when the new one would take the store past WithMaxBytes.
func TestMemoryStoreBytesBound(t *testing.T) {
	ctx := context.Background()
	// 32 answers of 10 bytes plus a 2-byte key ("kN" for N < 10, 3 bytes after).
	s := dedup.NewMemoryStore(dedup.WithMaxBytes(32*13), dedup.WithMaxEntries(1000))
	memFill(t, s, 32)
	st := s.Stats()
	if st.Evicted != 0 || st.Bytes != 406 {
		t.Fatalf("32 answers within the bytes bound: %+v", st)
	}
	s.Acquire(ctx, "big", memLease)
	// 406 + 3 + 10 = 419 > 416: the oldest answer (12 bytes) goes, and only it.
	if err := s.Complete(ctx, "big", "t", make([]byte, 10), time.Hour); err != nil {
		t.Fatal(err)
	}
	st = s.Stats()
	if e, _ := s.Get(ctx, "k0"); st.Evicted != 1 || e.State != dedup.Absent || st.Bytes != 406-12+13 {
		t.Fatalf("one answer over the bytes bound: %+v, k0 %v", st, e.State)
	}
}

// TestMemoryStoreBoundProperty drives stores of random bounds with random keys,
// answers and time (one retention per store, as the middleware uses), against a
// model: an answer is evicted only when the store is at its bound (entries: a new
// key arrives while it holds its bound of records; bytes: an answer would take it
// past its bound), the oldest first; nothing else is lost; the bounds always hold.
// MEMSTORE_SEED=n replays a run.
func TestMemoryStoreBoundProperty(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("MEMSTORE_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d: rerun with MEMSTORE_SEED=%d", seed, seed)
		}
	})
	rng := rand.New(rand.NewPCG(seed, 0))
	for run := range 40 {
		m := newMemModel(rng)
		synctest.Test(t, func(t *testing.T) {
			for i := range 400 {
				if !m.step(t, rng) {
					t.Fatalf("run %d (bounds %d entries, %d bytes), step %d", run, m.maxN, m.maxB, i)
				}
			}
		})
		if t.Failed() {
			return
		}
	}
}

// memModel is what TestMemoryStoreBoundProperty expects of a MemoryStore.
type memModel struct {
	s          *dedup.MemoryStore
	maxN, maxB int
	retain     time.Duration
	keys       int
	recs       map[string]*memRec
	seq        int // completion order
	evicted    int
}

type memRec struct {
	done    bool
	token   string
	expires time.Time
	answer  []byte
	seq     int
}

func newMemModel(rng *rand.Rand) *memModel {
	m := &memModel{
		maxN:   1 + rng.IntN(60),
		maxB:   32 * (4 + rng.IntN(40)),
		retain: time.Duration(1+rng.IntN(60)) * time.Second,
		recs:   map[string]*memRec{},
	}
	m.keys = 1 + rng.IntN(3*m.maxN)
	m.s = dedup.NewMemoryStore(dedup.WithMaxEntries(m.maxN), dedup.WithMaxBytes(m.maxB))
	return m
}

// touch forgets key's record if it has expired, as any operation on the key does.
func (m *memModel) touch(key string) *memRec {
	r := m.recs[key]
	if r != nil && !time.Now().Before(r.expires) {
		delete(m.recs, key)
		return nil
	}
	return r
}

// counts returns the live records, the expired leases the store still holds, and
// the live answers oldest first.
func (m *memModel) counts() (live, staleLeases int, done []string) {
	now := time.Now()
	for k, r := range m.recs {
		switch {
		case now.Before(r.expires):
			live++
			if r.done {
				done = append(done, k)
			}
		case !r.done:
			staleLeases++
		}
	}
	slices.SortFunc(done, func(a, b string) int { return m.recs[a].seq - m.recs[b].seq })
	return live, staleLeases, done
}

// running returns the keys of the leases, sorted so that a seed replays a run.
func (m *memModel) running() []string {
	var keys []string
	for k, r := range m.recs {
		if !r.done {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

func (m *memModel) evict(k string) {
	delete(m.recs, k)
	m.evicted++
}

// step does one random operation on the store and the model, and checks the store.
func (m *memModel) step(t *testing.T, rng *rand.Rand) bool {
	t.Helper()
	ctx := context.Background()
	key := fmt.Sprint("k", rng.IntN(m.keys))
	op := rng.IntN(10)
	if running := m.running(); op >= 4 && op < 8 && len(running) > 0 && rng.IntN(8) > 0 {
		key = running[rng.IntN(len(running))] // complete or release a lease, mostly
	}
	switch {
	case op < 4: // acquire
		tok := fmt.Sprint("t", rng.Uint64())
		ttl := time.Duration(1+rng.IntN(10000)) * time.Millisecond
		r := m.touch(key)
		ok, e, err := m.s.Acquire(ctx, key, dedup.Lease{Token: tok, Fingerprint: "f" + tok, TTL: ttl})
		if r != nil {
			if ok || err != nil || (e.State == dedup.Done) != r.done || (r.done && !bytes.Equal(e.Answer, r.answer)) {
				t.Errorf("acquire of %s held: %v %+v %v, want its record", key, ok, e, err)
				return false
			}
			break
		}
		live, stale, done := m.counts()
		want := error(nil)
		switch {
		case live+stale < m.maxN:
		case len(done) > 0:
			m.evict(done[0])
		case stale > 0:
			for k, r := range m.recs { // the store drops its expired leases
				if !r.done && !time.Now().Before(r.expires) {
					delete(m.recs, k)
				}
			}
		default:
			want = dedup.ErrStoreFull
		}
		if ok != (want == nil) || !errors.Is(err, want) {
			t.Errorf("acquire of new %s (%d live, %d stale leases, bound %d): %v %v, want %v", key, live, stale, m.maxN, ok, err, want)
			return false
		}
		if ok {
			m.recs[key] = &memRec{token: tok, expires: time.Now().Add(ttl)}
		}
	case op < 7: // complete, by the lease's holder mostly
		r := m.touch(key)
		tok := "other"
		if r != nil && rng.IntN(8) > 0 {
			tok = r.token
		}
		size := rng.IntN(m.maxB/32 + 4)
		if rng.IntN(2) == 0 { // near the largest kept, so that bytes run out before entries
			size = max(m.maxB/32-len(key)-rng.IntN(3), 0)
		}
		answer := make([]byte, size)
		for i := range answer {
			answer[i] = byte(rng.Uint32())
		}
		err := m.s.Complete(ctx, key, tok, answer, m.retain)
		var want error
		switch {
		case r == nil || r.done || r.token != tok:
			want = dedup.ErrLeaseLost
		case len(answer)+len(key) > m.maxB/32:
			want = dedup.ErrAnswerTooLarge
		default:
			_, _, done := m.counts()
			bytes := len(answer) + len(key)
			for _, k := range done {
				bytes += len(m.recs[k].answer) + len(k)
			}
			for len(done) > 0 && bytes > m.maxB {
				bytes -= len(m.recs[done[0]].answer) + len(done[0])
				m.evict(done[0])
				done = done[1:]
			}
			m.seq++
			r.done, r.answer, r.expires, r.seq = true, answer, time.Now().Add(m.retain), m.seq
		}
		if err != want {
			t.Errorf("complete %s: %v, want %v", key, err, want)
			return false
		}
	case op < 8: // release
		r := m.touch(key)
		tok := "other"
		if r != nil && rng.IntN(8) > 0 {
			tok = r.token
		}
		err := m.s.Release(ctx, key, tok)
		want := dedup.ErrLeaseLost
		if r != nil && !r.done && r.token == tok {
			want = nil
			delete(m.recs, key)
		}
		if err != want {
			t.Errorf("release %s: %v, want %v", key, err, want)
			return false
		}
	case op < 9: // get
		r := m.touch(key)
		e, err := m.s.Get(ctx, key)
		if err != nil || (r == nil) != (e.State == dedup.Absent) {
			t.Errorf("get %s: %+v %v, want %+v", key, e, err, r)
			return false
		}
	default:
		<-time.After(time.Duration(rng.IntN(1000)) * time.Millisecond) // on the bubble's clock: step runs in synctest
	}
	return m.check(t)
}

// check compares the store with the model: every live answer is there, byte-equal;
// the evictions are the model's; the bounds hold.
func (m *memModel) check(t *testing.T) bool {
	t.Helper()
	live, stale, done := m.counts()
	st := m.s.Stats()
	if st.Evicted != m.evicted || st.Entries > m.maxN || st.Bytes > m.maxB || st.Entries < live+stale {
		t.Errorf("stats %+v; want %d evicted, %d … %d entries, at most %d bytes", st, m.evicted, live+stale, m.maxN, m.maxB)
		return false
	}
	for _, k := range done {
		if e, err := m.s.Get(context.Background(), k); err != nil || e.State != dedup.Done || !bytes.Equal(e.Answer, m.recs[k].answer) {
			t.Errorf("answer of %s lost: %+v %v", k, e, err)
			return false
		}
	}
	return true
}

// TestMemoryStoreBoundConcurrent: from many goroutines at once, the bounds still
// hold at every moment Stats looks.
func TestMemoryStoreBoundConcurrent(t *testing.T) {
	ctx := context.Background()
	const maxN, maxB = 40, 32 * 64
	s := dedup.NewMemoryStore(dedup.WithMaxEntries(maxN), dedup.WithMaxBytes(maxB))
	testkit.Parallel(8, 20_000, func(i int) {
		k := fmt.Sprint("k", i%97)
		tok := strconv.Itoa(i)
		ok, _, err := s.Acquire(ctx, k, dedup.Lease{Token: tok, Fingerprint: "f", TTL: time.Minute})
		if err != nil && err != dedup.ErrStoreFull {
			t.Error(err)
		}
		if ok {
			if i%3 == 0 {
				_ = s.Release(ctx, k, tok)
			} else {
				_ = s.Complete(ctx, k, tok, make([]byte, i%60), time.Hour)
			}
		}
		if st := s.Stats(); st.Entries > maxN || st.Bytes > maxB {
			t.Errorf("stats %+v past the bounds", st)
		}
	})
	if st := s.Stats(); st.Evicted == 0 {
		t.Fatalf("no eviction in a run that must evict: %+v", st)
	}
}

// benchHandler answers 201 with a small JSON body, as a charge endpoint would.
var benchHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write([]byte(`{"id":"ch_1","amount":100,"status":"succeeded"}`))
})

type benchDiscard struct{ h http.Header }

func (d *benchDiscard) Header() http.Header         { return d.h }
func (d *benchDiscard) Write(b []byte) (int, error) { return len(b), nil }
func (d *benchDiscard) WriteHeader(int)             {}

// benchMemory is the middleware on a MemoryStore, in-process: key(i) is the i-th
// request's key.
func benchMemory(b *testing.B, store *dedup.MemoryStore, key func(i int) string) {
	body := []byte(`{"amount":100,"currency":"eur","source":"tok_visa"}`)
	h := dedup.NewMiddleware(store)(benchHandler)
	rd := bytes.NewReader(body)
	req := httptest.NewRequest(http.MethodPost, "/charges?customer=c1", nil)
	w := &benchDiscard{h: http.Header{}}
	serve := func(i int) {
		rd.Reset(body)
		req.Body = io.NopCloser(rd)
		req.ContentLength = int64(len(body))
		req.Header["Idempotency-Key"] = []string{key(i)}
		clear(w.h)
		h.ServeHTTP(w, req)
	}
	serve(-1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		serve(i)
	}
}

var benchRuns atomic.Int64

// BenchmarkMemoryFirst is a first request (a new key) through the middleware on a
// MemoryStore far from its bounds.
func BenchmarkMemoryFirst(b *testing.B) {
	p := fmt.Sprint("f", benchRuns.Add(1), "-")
	benchMemory(b, dedup.NewMemoryStore(dedup.WithMaxEntries(10_000_000), dedup.WithMaxBytes(1<<30)),
		func(i int) string { return p + strconv.Itoa(i) })
}

// BenchmarkMemoryFirstAtBound is a first request on a MemoryStore at its bound of
// entries: each one evicts the oldest answer.
func BenchmarkMemoryFirstAtBound(b *testing.B) {
	p := fmt.Sprint("b", benchRuns.Add(1), "-")
	benchMemory(b, dedup.NewMemoryStore(dedup.WithMaxEntries(1000)),
		func(i int) string { return p + strconv.Itoa(i) })
}

// BenchmarkMemoryReplay is a repeat of a completed request: a replay.
func BenchmarkMemoryReplay(b *testing.B) {
	benchMemory(b, dedup.NewMemoryStore(), func(int) string { return "replayed" })
}

// BenchmarkMemoryStoreParallel is the store alone, Acquire then Complete of new keys
// from GOMAXPROCS goroutines, at its bound.
func BenchmarkMemoryStoreParallel(b *testing.B) {
	s := dedup.NewMemoryStore(dedup.WithMaxEntries(10_000))
	var n atomic.Int64
	answer := make([]byte, 200)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			k := strconv.FormatInt(n.Add(1), 10)
			s.Acquire(ctx, k, memLease)
			s.Complete(ctx, k, "t", answer, time.Hour)
		}
	})
}

// TestMemoryStoreContract holds the MemoryStore to the Store contract, under fake
// time; its Wait is woken, so it may not notice late.
func TestMemoryStoreContract(t *testing.T) {
	storecheck.Run(t, func(*testing.T) dedup.Store { return dedup.NewMemoryStore() },
		storecheck.FakeTime(), storecheck.WithNotice(0), storecheck.WithOps(300))
}

// TestMemoryStoreBoundPropertyNarrowHash is TestMemoryStoreBoundProperty on stores
// whose keys share 4 hashes: records that meet another key's under their hash are
// found, bounded, evicted and reaped like the others.
func TestMemoryStoreBoundPropertyNarrowHash(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("MEMSTORE_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d: rerun with MEMSTORE_SEED=%d", seed, seed)
		}
	})
	rng := rand.New(rand.NewPCG(seed, 0))
	for run := range 40 {
		m := newMemModel(rng)
		dedup.NarrowHash(m.s, 2)
		synctest.Test(t, func(t *testing.T) {
			for i := range 400 {
				if !m.step(t, rng) {
					t.Fatalf("run %d (bounds %d entries, %d bytes), step %d", run, m.maxN, m.maxB, i)
				}
			}
		})
		if t.Failed() {
			return
		}
	}
}

// TestMemoryStoreContractNarrowHash is TestMemoryStoreContract on a store whose
// keys share 2 hashes.
func TestMemoryStoreContractNarrowHash(t *testing.T) {
	storecheck.Run(t, func(*testing.T) dedup.Store {
		s := dedup.NewMemoryStore()
		dedup.NarrowHash(s, 1)
		return s
	}, storecheck.FakeTime(), storecheck.WithNotice(0), storecheck.WithOps(300))
}

// TestMemoryStoreKeepsAnswersWhileItsBuffersMove churns a store through many
// times its shards' buffers (answers stored, leases released, answers evicted for
// room) and checks every record it holds, and every Entry read before the churn,
// byte for byte.
func TestMemoryStoreKeepsAnswersWhileItsBuffersMove(t *testing.T) {
	ctx := context.Background()
	s := dedup.NewMemoryStore(dedup.WithMaxEntries(3000))
	answer := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 1+i%300) }
	fp := func(i int) string { return "fp-" + strconv.Itoa(i) }
	type read struct {
		i int
		e dedup.Entry
	}
	const n = 40_001 // the last one stored, not released
	var early []read
	for i := range n {
		k, tok := "key-"+strconv.Itoa(i), "tok-"+strconv.Itoa(i)
		got, _, err := s.Acquire(ctx, k, dedup.Lease{Token: tok, Fingerprint: fp(i), TTL: time.Hour})
		if err != nil || !got {
			t.Fatalf("key %d: acquired %v, %v", i, got, err)
		}
		if i%3 == 0 {
			if err := s.Release(ctx, k, tok); err != nil {
				t.Fatalf("release %d: %v", i, err)
			}
			continue
		}
		if err := s.Complete(ctx, k, tok, answer(i), time.Hour); err != nil {
			t.Fatalf("complete %d: %v", i, err)
		}
		if i < 3000 && i%100 == 1 {
			e, err := s.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			early = append(early, read{i, e})
		}
	}
	for _, h := range early {
		if h.e.State != dedup.Done || h.e.Fingerprint != fp(h.i) || !bytes.Equal(h.e.Answer, answer(h.i)) {
			t.Errorf("the entry of key %d read early became %v %q %q", h.i, h.e.State, h.e.Fingerprint, h.e.Answer)
		}
	}
	held := 0
	for i := range n {
		e, err := s.Get(ctx, "key-"+strconv.Itoa(i))
		switch {
		case err != nil:
			t.Fatal(err)
		case e.State == dedup.Absent:
			continue
		case i%3 == 0 || e.State != dedup.Done || e.Fingerprint != fp(i) || !bytes.Equal(e.Answer, answer(i)):
			t.Fatalf("key %d: %v %q %q", i, e.State, e.Fingerprint, e.Answer)
		}
		held++
	}
	if st := s.Stats(); held != 3000 || st.Entries != 3000 || st.Evicted == 0 {
		t.Fatalf("held %d answers, stats %+v; want the bound, 3000", held, st)
	}
}

// TestMemoryStoreKeepsLeasesWhileItsBuffersMove leaves one lease in 20 of many with
// long fingerprints: the store's buffers fill with bytes no record holds but for a
// few in each, which it moves; every lease left is found whole and completes with
// its token.
func TestMemoryStoreKeepsLeasesWhileItsBuffersMove(t *testing.T) {
	ctx := context.Background()
	s := dedup.NewMemoryStore()
	fp := func(i int) string { return strconv.Itoa(i) + strings.Repeat("f", 1000) }
	for i := range 20_000 {
		k, tok := "key-"+strconv.Itoa(i), "tok-"+strconv.Itoa(i)
		if got, _, err := s.Acquire(ctx, k, dedup.Lease{Token: tok, Fingerprint: fp(i), TTL: time.Hour}); err != nil || !got {
			t.Fatalf("key %d: acquired %v, %v", i, got, err)
		}
		if i%20 != 0 {
			if err := s.Release(ctx, k, tok); err != nil {
				t.Fatalf("release %d: %v", i, err)
			}
		}
	}
	for i := 0; i < 20_000; i += 20 {
		k := "key-" + strconv.Itoa(i)
		if e, err := s.Get(ctx, k); err != nil || e.State != dedup.Running || e.Fingerprint != fp(i) {
			t.Fatalf("key %d: %v %.20q, %v", i, e.State, e.Fingerprint, err)
		}
		if err := s.Complete(ctx, k, "tok-"+strconv.Itoa(i), []byte(k), time.Hour); err != nil {
			t.Fatalf("complete %d: %v", i, err)
		}
		if e, err := s.Get(ctx, k); err != nil || e.State != dedup.Done || string(e.Answer) != k {
			t.Fatalf("key %d: %v %q, %v", i, e.State, e.Answer, err)
		}
	}
	if st := s.Stats(); st.Entries != 1000 {
		t.Fatalf("stats %+v, want 1000 entries", st)
	}
}

// TestMemoryStoreKeepsNoTokenOfACompletedRequest completes each request before the
// next comes, as on a quiet server: the store keeps no byte of their tokens, only
// their keys, fingerprints and answers, and gives every answer back whole.
func TestMemoryStoreKeepsNoTokenOfACompletedRequest(t *testing.T) {
	ctx := context.Background()
	s := dedup.NewMemoryStore()
	const n = 1000
	for i := range n {
		k, tok := "key-"+strconv.Itoa(i), fmt.Sprintf("%032d", i)
		if got, _, err := s.Acquire(ctx, k, dedup.Lease{Token: tok, Fingerprint: "fp", TTL: time.Hour}); err != nil || !got {
			t.Fatalf("key %d: acquired %v, %v", i, got, err)
		}
		if err := s.Complete(ctx, k, tok, []byte("answer "+k), time.Hour); err != nil {
			t.Fatalf("complete %d: %v", i, err)
		}
	}
	if written, held := dedup.WrittenBytes(s); written != held {
		t.Errorf("the store wrote %d bytes and holds %d: %d dead", written, held, written-held)
	}
	for i := range n {
		k := "key-" + strconv.Itoa(i)
		if e, err := s.Get(ctx, k); err != nil || e.State != dedup.Done || e.Fingerprint != "fp" || string(e.Answer) != "answer "+k {
			t.Fatalf("key %d: %v %q %q, %v", i, e.State, e.Fingerprint, e.Answer, err)
		}
	}
}

// TestMemoryStoreGivesFingerprintsBackAsGiven stores fingerprints of every shape
// (the middleware's hex digits, which the store keeps packed, and others, which it
// keeps as they are) and reads each back, through Acquire with the same and with
// another fingerprint, Get and Wait, as it was given; a repeat with the same hex
// fingerprint reads it without an allocation, and a packed one takes half its bytes.
func TestMemoryStoreGivesFingerprintsBackAsGiven(t *testing.T) {
	ctx := context.Background()
	hexFP := strings.Repeat("0123456789abcdef", 4)
	fps := []string{hexFP, "", "a", "ab", "0f", "ABCDEF", "abcdeg", "fp-1", hexFP + "0", strings.ToUpper(hexFP)}
	s := dedup.NewMemoryStore()
	for i, fp := range fps {
		k := "key-" + strconv.Itoa(i)
		if got, _, err := s.Acquire(ctx, k, dedup.Lease{Token: "tok", Fingerprint: fp, TTL: time.Hour}); err != nil || !got {
			t.Fatalf("%q: acquired %v, %v", fp, got, err)
		}
		check := func(how string, e dedup.Entry, err error, state dedup.State) {
			t.Helper()
			if err != nil || e.State != state || e.Fingerprint != fp {
				t.Fatalf("%q, %s: %v %q, %v", fp, how, e.State, e.Fingerprint, err)
			}
		}
		_, e, err := s.Acquire(ctx, k, dedup.Lease{Token: "other", Fingerprint: fp, TTL: time.Hour})
		check("acquired again", e, err, dedup.Running)
		_, e, err = s.Acquire(ctx, k, dedup.Lease{Token: "other", Fingerprint: fp + "00", TTL: time.Hour})
		check("acquired with another", e, err, dedup.Running)
		e, err = s.Get(ctx, k)
		check("got", e, err, dedup.Running)
		if err := s.Complete(ctx, k, "tok", []byte("answer"), time.Hour); err != nil {
			t.Fatal(err)
		}
		e, err = s.Wait(ctx, k)
		check("waited", e, err, dedup.Done)
	}
	repeat := dedup.Lease{Token: "other", Fingerprint: strings.Clone(hexFP), TTL: time.Hour}
	if n := testing.AllocsPerRun(100, func() {
		if _, e, _ := s.Acquire(ctx, "key-0", repeat); e.Fingerprint != hexFP {
			t.Fatalf("%q", e.Fingerprint)
		}
	}); n != 0 {
		t.Errorf("a repeat's Acquire allocates %v times, want 0", n)
	}
	one := dedup.NewMemoryStore()
	if _, _, err := one.Acquire(ctx, "k", dedup.Lease{Token: "t", Fingerprint: hexFP, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if written, _ := dedup.WrittenBytes(one); written != len("k")+len(hexFP)/2+len("t") {
		t.Errorf("a lease with a hex fingerprint of %d digits took %d bytes", len(hexFP), written)
	}
}

// TestMiddlewareFingerprintKeptAsItsBytes: the memory store keeps the fingerprint
// of a request the middleware ran as the 32 bytes of its SHA-256, and still tells a
// repeat (replayed) from another request with the key (refused).
func TestMiddlewareFingerprintKeptAsItsBytes(t *testing.T) {
	s := dedup.NewMemoryStore()
	h := dedup.NewMiddleware(s)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("done"))
	}))
	post := func(body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "k")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := post("100"); rec.Code != http.StatusOK || rec.Header().Get(dedup.ReplayedHeader) != "" {
		t.Fatalf("first: %d, replayed %q", rec.Code, rec.Header().Get(dedup.ReplayedHeader))
	}
	written, _ := dedup.WrittenBytes(s)
	if fp := written - s.Stats().Bytes; fp != 32 {
		t.Errorf("the fingerprint took %d bytes, want 32", fp)
	}
	if rec := post("100"); rec.Code != http.StatusOK || rec.Header().Get(dedup.ReplayedHeader) != "true" {
		t.Errorf("repeat: %d, replayed %q", rec.Code, rec.Header().Get(dedup.ReplayedHeader))
	}
	if rec := post("200"); rec.Code != http.StatusUnprocessableEntity {
		t.Errorf("another body with the key: %d, want 422", rec.Code)
	}
}
