package dedup

import (
	"context"
	"errors"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a [MemoryStore]'s bounds.
const (
	DefaultMaxEntries = 100_000
	DefaultMaxBytes   = 64 << 20
)

// ErrStoreFull is what a [MemoryStore]'s Acquire returns when its bound on entries
// is reached by running requests alone (completed answers are evicted, oldest first,
// to make room): the middleware answers 503 / Unavailable.
var ErrStoreFull = errors.New("dedup: the memory store is full of running requests")

// MemoryOption configures a [MemoryStore].
type MemoryOption func(*MemoryStore)

// WithMaxEntries bounds the records a [MemoryStore] keeps, running and done.
// Default [DefaultMaxEntries].
func WithMaxEntries(n int) MemoryOption {
	return func(s *MemoryStore) {
		if n > 0 {
			s.maxEntries = int64(n)
		}
	}
}

// WithMaxBytes bounds the bytes of the answers (and their keys) a [MemoryStore]
// keeps. One answer may take at most 1/32 of it: a larger one is refused with
// [ErrAnswerTooLarge], so that no single answer evicts more than a small share of
// the others. Default [DefaultMaxBytes] (64 MiB).
func WithMaxBytes(n int) MemoryOption {
	return func(s *MemoryStore) {
		if n > 0 {
			s.maxBytes = int64(n)
		}
	}
}

const (
	memShards = 32
	// memAnswerShare is the share of WithMaxBytes one answer may take.
	memAnswerShare = 32
)

// MemoryStore is a [Store] in the process's memory, the embedded default for a
// service with one replica (with several, each would deduplicate only what it
// sees: use package dedup/redisstore). Its zero value is not usable: call
// [NewMemoryStore].
//
// Its memory is bounded, and the bounds are the whole store's. A new key that
// arrives while the store holds [WithMaxEntries] records evicts the oldest
// completed answer of the whole store; an answer that would take the bytes held
// past [WithMaxBytes] evicts the oldest answers until it fits. Nothing else evicts:
// while the store holds fewer records, and fewer bytes, than its bounds, no answer
// is lost before its retention ends. A repeat of an evicted key runs again: size
// the bounds for the traffic of a retention window, and watch
// [MemoryStore.Stats]. When the store holds its bound of running requests and no
// answer, Acquire refuses a new key with [ErrStoreFull].
//
// Two things are near rather than exact. A record whose lease or retention has
// ended counts as held until it is removed: when its key is used again, when it
// is at the front of the shard of a new key, or when its room is needed (an ended
// answer goes before any live one is evicted, an ended lease only when there is
// no answer left to evict). With one retention for every answer, as the
// middleware gives, answers end in the order they completed, so no live answer is
// evicted while an ended one is held. And between concurrent calls, the records
// held include those that calls under way are adding, and the oldest answer is
// the oldest when the evicting call looked.
//
// It is sharded for concurrent use: a call takes one shard's lock and adds to the
// store's atomic counts of entries and bytes; only an eviction looks at the other
// shards, one at a time. Records expire when their lease or retention ends,
// without a goroutine of its own.
type MemoryStore struct {
	seed                 maphash.Seed
	mask                 uint64    // of a key's hash: all ones but in tests ([MemoryStore.hash])
	epoch                time.Time // the store's clock starts here ([MemoryStore.clock])
	maxEntries, maxBytes int64
	// entries counts the records held and those being added; bytes, the bytes held
	// and those being added. A call that takes either past its bound evicts before
	// it adds.
	entries, bytes atomic.Int64
	seq            atomic.Uint64 // completion order
	evicted        atomic.Int64
	// reapAfter is the earliest end (on the store's clock) of a lease reapLeases
	// has not removed.
	reapAfter atomic.Int64
	_         [16]byte
	shards    [memShards]memShard
}

type memShard struct {
	mu sync.Mutex
	// m holds the records by their key's hash: a map that grows rehashes its
	// slots, not its keys, and a slot holds no string. A record whose hash another
	// key's record holds in m is in over, by its key (nil until there is one).
	m          map[uint64]*memEntry
	over       map[string]*memEntry
	head, tail *memEntry // done entries, oldest completed first
	bytes      int64
	// oldest is head's completion sequence number (math.MaxUint64 when there is no
	// head), read without the lock to find the store's oldest answer.
	oldest atomic.Uint64
	_      [16]byte // keep shards on their own cache lines
}

type memEntry struct {
	key        string
	token, fp  string // token: running only
	expires    int64  // on the store's clock ([MemoryStore.clock])
	answer     []byte
	seq        uint64        // done: completion order, from 1; 0 while running
	done       chan struct{} // running: closed when it stops running (made on first Wait)
	prev, next *memEntry
}

// state is e's: [Done] once it has a completion order, [Running] before (a
// removed record is read by no one).
func (e *memEntry) state() State {
	if e.seq != 0 {
		return Done
	}
	return Running
}

// NewMemoryStore returns an empty [MemoryStore].
func NewMemoryStore(opts ...MemoryOption) *MemoryStore {
	s := &MemoryStore{seed: maphash.MakeSeed(), mask: math.MaxUint64, epoch: time.Now(), maxEntries: DefaultMaxEntries, maxBytes: DefaultMaxBytes}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	s.reapAfter.Store(math.MinInt64) // the clock may read before 0: a clock of another bubble (testing/synctest)
	for i := range s.shards {
		s.shards[i].m = map[uint64]*memEntry{}
		s.shards[i].oldest.Store(math.MaxUint64)
	}
	return s
}

// MemoryStats are a [MemoryStore]'s counts.
type MemoryStats struct {
	Entries int // records held, running and done (some may have expired)
	Bytes   int // bytes of the done records' answers and keys
	Evicted int // done records evicted before their retention ended, for room
}

// Stats returns the store's counts, all taken at one moment.
func (s *MemoryStore) Stats() MemoryStats {
	for i := range s.shards {
		s.shards[i].mu.Lock()
	}
	st := MemoryStats{Evicted: int(s.evicted.Load())}
	for i := range s.shards {
		sh := &s.shards[i]
		st.Entries += len(sh.m) + len(sh.over)
		st.Bytes += int(sh.bytes)
		sh.mu.Unlock()
	}
	return st
}

// clock is the time on the store's clock: nanoseconds since the store was made, on
// the monotonic clock. A record's end is one int64, not a time.Time (24 bytes, with
// a pointer): smaller records for the whole retention.
func (s *MemoryStore) clock() int64 { return int64(time.Since(s.epoch)) }

// after is d after now on the store's clock, at most the clock's end.
func after(now int64, d time.Duration) int64 {
	switch {
	case d > 0 && now > math.MaxInt64-int64(d):
		return math.MaxInt64
	case d < 0 && now < math.MinInt64-int64(d):
		return math.MinInt64
	}
	return now + int64(d)
}

// hash is key's hash, which picks its shard and is its index in the shard.
func (s *MemoryStore) hash(key string) uint64 { return maphash.String(s.seed, key) & s.mask }

func (s *MemoryStore) shard(h uint64) *memShard { return &s.shards[h%memShards] }

// get returns key's record, whose hash is h, expired or not.
func (sh *memShard) get(h uint64, key string) *memEntry {
	if e := sh.m[h]; e != nil && e.key == key {
		return e
	}
	return sh.over[key]
}

// put adds e, whose key's hash is h and which sh does not hold.
func (sh *memShard) put(h uint64, e *memEntry) {
	if _, taken := sh.m[h]; !taken {
		sh.m[h] = e
		return
	}
	if sh.over == nil {
		sh.over = map[string]*memEntry{}
	}
	sh.over[e.key] = e
}

// live returns key's entry (its hash h) if it has not expired, removing it if it
// has.
func (s *MemoryStore) live(sh *memShard, h uint64, key string, now int64) *memEntry {
	e := sh.get(h, key)
	if e == nil {
		return nil
	}
	if now < e.expires {
		return e
	}
	s.remove(sh, e)
	return nil
}

// remove takes e out of sh and out of the store's counts.
func (s *MemoryStore) remove(sh *memShard, e *memEntry) {
	if h := s.hash(e.key); sh.m[h] == e {
		delete(sh.m, h)
	} else {
		delete(sh.over, e.key)
	}
	s.entries.Add(-1)
	if e.state() == Done {
		sh.unlink(e)
		size := int64(len(e.answer) + len(e.key))
		sh.bytes -= size
		s.bytes.Add(-size)
	}
	if e.done != nil {
		close(e.done)
		e.done = nil
	}
}

func (sh *memShard) append(e *memEntry) {
	if sh.tail == nil {
		sh.head, sh.tail = e, e
		sh.oldest.Store(e.seq)
		return
	}
	e.prev, sh.tail.next, sh.tail = sh.tail, e, e
}

func (sh *memShard) unlink(e *memEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		sh.head = e.next
		if sh.head != nil {
			sh.oldest.Store(sh.head.seq)
		} else {
			sh.oldest.Store(math.MaxUint64)
		}
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		sh.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

// sweep removes sh's expired answers from its front.
func (s *MemoryStore) sweep(sh *memShard, now int64) {
	for e := sh.head; e != nil && now >= e.expires; e = sh.head {
		s.remove(sh, e)
	}
}

func (e *memEntry) entry(now int64) Entry {
	return Entry{State: e.state(), Fingerprint: e.fp, Left: time.Duration(e.expires - now), Answer: e.answer}
}

// dropOldest removes the store's oldest answer: evicted (and counted) if its
// retention has not ended. It holds no lock but the answer's shard's, one shard at
// a time. It reports false when the store holds no answer.
func (s *MemoryStore) dropOldest(now int64) bool {
	for {
		best, oldest := -1, uint64(math.MaxUint64)
		for i := range s.shards {
			if o := s.shards[i].oldest.Load(); o < oldest {
				best, oldest = i, o
			}
		}
		if best < 0 {
			return false
		}
		sh := &s.shards[best]
		sh.mu.Lock()
		e := sh.head // the oldest, unless another call took it since
		if e != nil {
			if now < e.expires {
				s.evicted.Add(1)
			}
			s.remove(sh, e)
		}
		sh.mu.Unlock()
		if e != nil {
			return true
		}
	}
}

// reapLeases removes every lease that has ended, shard by shard, unless none can
// have ended yet, and reports whether it removed one. It is the last resort of a
// store full of running requests, so it spares the scan until the earliest lease's
// end it saw (or a new lease's end before it).
func (s *MemoryStore) reapLeases(now int64) bool {
	if now < s.reapAfter.Load() {
		return false
	}
	s.reapAfter.Store(math.MaxInt64)
	reaped := false
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		reaped = reapShard(s, sh, sh.m, now) || reaped
		reaped = reapShard(s, sh, sh.over, now) || reaped
		sh.mu.Unlock()
	}
	return reaped
}

// reapShard removes the leases of m, one of sh's maps, that have ended, and
// reports whether it removed one.
func reapShard[K comparable](s *MemoryStore, sh *memShard, m map[K]*memEntry, now int64) bool {
	reaped := false
	for _, e := range m {
		switch {
		case e.state() != Running:
		case now >= e.expires:
			s.remove(sh, e)
			reaped = true
		default:
			s.leaseEnds(e.expires)
		}
	}
	return reaped
}

// leaseEnds lowers the time before which reapLeases has nothing to find.
func (s *MemoryStore) leaseEnds(n int64) {
	for {
		cur := s.reapAfter.Load()
		if n >= cur || s.reapAfter.CompareAndSwap(cur, n) {
			return
		}
	}
}

// Acquire implements [Store]. A new key evicts the oldest answer when the store
// holds its bound of records.
func (s *MemoryStore) Acquire(_ context.Context, key string, l Lease) (bool, Entry, error) {
	h := s.hash(key)
	sh := s.shard(h)
	now := s.clock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := s.live(sh, h, key, now); e != nil {
		return false, e.entry(now), nil
	}
	s.sweep(sh, now)
	if s.entries.Add(1) > s.maxEntries {
		// Make room with no shard's lock held (dropOldest takes another's), then
		// look at the key again.
		sh.mu.Unlock()
		room := s.dropOldest(now) || s.reapLeases(now)
		sh.mu.Lock()
		if e := s.live(sh, h, key, now); e != nil || !room {
			s.entries.Add(-1)
			if e != nil {
				return false, e.entry(now), nil
			}
			return false, Entry{}, ErrStoreFull
		}
	}
	e := &memEntry{key: key, token: l.Token, fp: l.Fingerprint, expires: after(now, l.TTL)}
	sh.put(h, e)
	s.leaseEnds(e.expires)
	return true, Entry{}, nil
}

// Complete implements [Store]. It adds no record, so it evicts only for bytes: the
// oldest answers, while the store's bytes and the new answer's would pass
// [WithMaxBytes]. An answer (with its key) of more than 1/32 of WithMaxBytes is
// refused with [ErrAnswerTooLarge].
func (s *MemoryStore) Complete(_ context.Context, key, token string, answer []byte, retain time.Duration) error {
	h := s.hash(key)
	sh := s.shard(h)
	now := s.clock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.live(sh, h, key, now)
	if e == nil || e.state() != Running || e.token != token {
		return ErrLeaseLost
	}
	size := int64(len(answer) + len(key))
	if size > (s.maxBytes+memAnswerShare-1)/memAnswerShare {
		return ErrAnswerTooLarge
	}
	if s.bytes.Add(size) > s.maxBytes {
		sh.mu.Unlock()
		fits := s.dropUntilFits(now)
		sh.mu.Lock()
		if e = s.live(sh, h, key, now); e == nil || e.state() != Running || e.token != token {
			s.bytes.Add(-size)
			return ErrLeaseLost
		}
		if !fits { // the bytes are other completions' still under way
			s.bytes.Add(-size)
			return ErrAnswerTooLarge
		}
	}
	e.answer, e.expires, e.seq = answer, after(now, retain), s.seq.Add(1) // Complete's caller gives answer up: done
	e.token = ""                                                          // a done record has no lease
	sh.bytes += size
	sh.append(e)
	if e.done != nil {
		close(e.done)
		e.done = nil
	}
	return nil
}

// dropUntilFits drops the oldest answers while the store's bytes are past its
// bound, and reports whether they fit.
func (s *MemoryStore) dropUntilFits(now int64) bool {
	for s.bytes.Load() > s.maxBytes {
		if !s.dropOldest(now) {
			return false
		}
	}
	return true
}

// Release implements [Store].
func (s *MemoryStore) Release(_ context.Context, key, token string) error {
	h := s.hash(key)
	sh := s.shard(h)
	now := s.clock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.live(sh, h, key, now)
	if e == nil || e.state() != Running || e.token != token {
		return ErrLeaseLost
	}
	s.remove(sh, e)
	return nil
}

// Get implements [Store].
func (s *MemoryStore) Get(_ context.Context, key string) (Entry, error) {
	h := s.hash(key)
	sh := s.shard(h)
	now := s.clock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := s.live(sh, h, key, now); e != nil {
		return e.entry(now), nil
	}
	return Entry{}, nil
}

// Wait implements [Store]: it is woken when the record completes or is released,
// or when its lease ends.
func (s *MemoryStore) Wait(ctx context.Context, key string) (Entry, error) {
	h := s.hash(key)
	sh := s.shard(h)
	for {
		now := s.clock()
		sh.mu.Lock()
		e := s.live(sh, h, key, now)
		if e == nil || e.state() != Running {
			var cur Entry
			if e != nil {
				cur = e.entry(now)
			}
			sh.mu.Unlock()
			return cur, nil
		}
		if e.done == nil {
			e.done = make(chan struct{})
		}
		ch, left := e.done, time.Duration(e.expires-now)
		sh.mu.Unlock()
		t := time.NewTimer(left)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Entry{}, ctx.Err()
		}
		t.Stop()
	}
}
