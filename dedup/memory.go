package dedup

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
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
			s.maxEntries = n
		}
	}
}

// WithMaxBytes bounds the bytes of the answers (and keys) a [MemoryStore] keeps.
// Default [DefaultMaxBytes] (64 MiB).
func WithMaxBytes(n int) MemoryOption {
	return func(s *MemoryStore) {
		if n > 0 {
			s.maxBytes = n
		}
	}
}

const memShards = 32

// MemoryStore is a [Store] in the process's memory, the embedded default for a
// service with one replica (with several, each would deduplicate only what it
// sees: use package dedup/redisstore). Its memory is bounded: past
// [WithMaxEntries] records or [WithMaxBytes] bytes, the oldest completed answers are
// evicted before their retention ends (a repeat of an evicted key runs again: size
// the bounds for the traffic of a retention window, and watch
// [MemoryStore.Stats]). Records expire when their lease or retention ends; expired
// records are removed as the store is used, without a goroutine of its own. It is
// sharded for concurrent use. Its zero value is not usable: call [NewMemoryStore].
type MemoryStore struct {
	seed                 maphash.Seed
	maxEntries, maxBytes int
	shards               [memShards]memShard
}

type memShard struct {
	mu         sync.Mutex
	m          map[string]*memEntry
	head, tail *memEntry // done entries, oldest completed first
	bytes      int
	evicted    int
	maxN, maxB int
	_          [40]byte // keep shards on their own cache lines
}

type memEntry struct {
	key        string
	state      State
	token, fp  string
	expires    time.Time
	answer     []byte
	done       chan struct{} // running: closed when it stops running (made on first Wait)
	prev, next *memEntry
}

// NewMemoryStore returns an empty [MemoryStore].
func NewMemoryStore(opts ...MemoryOption) *MemoryStore {
	s := &MemoryStore{seed: maphash.MakeSeed(), maxEntries: DefaultMaxEntries, maxBytes: DefaultMaxBytes}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.m = map[string]*memEntry{}
		sh.maxN = max((s.maxEntries+memShards-1)/memShards, 1)
		sh.maxB = max((s.maxBytes+memShards-1)/memShards, 1)
	}
	return s
}

// MemoryStats are a [MemoryStore]'s counts.
type MemoryStats struct {
	Entries int // records held, running and done (some may have expired)
	Bytes   int // bytes of the done records' answers and keys
	Evicted int // done records evicted before their retention ended, for room
}

// Stats returns the store's counts.
func (s *MemoryStore) Stats() MemoryStats {
	var st MemoryStats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Entries += len(sh.m)
		st.Bytes += sh.bytes
		st.Evicted += sh.evicted
		sh.mu.Unlock()
	}
	return st
}

func (s *MemoryStore) shard(key string) *memShard {
	return &s.shards[maphash.String(s.seed, key)%memShards]
}

// live returns key's entry if it has not expired, removing it if it has.
func (sh *memShard) live(key string, now time.Time) *memEntry {
	e := sh.m[key]
	if e == nil {
		return nil
	}
	if now.Before(e.expires) {
		return e
	}
	sh.remove(e)
	return nil
}

func (sh *memShard) remove(e *memEntry) {
	delete(sh.m, e.key)
	if e.state == Done {
		sh.unlink(e)
		sh.bytes -= len(e.answer) + len(e.key)
	}
	if e.done != nil {
		close(e.done)
		e.done = nil
	}
	e.state = Absent
}

func (sh *memShard) unlink(e *memEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		sh.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		sh.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

// sweep removes expired done entries from the front, and evicts the oldest while the
// shard is above its bounds (need: room for one more entry and extra bytes).
func (sh *memShard) sweep(now time.Time, need int) {
	for e := sh.head; e != nil && !now.Before(e.expires); e = sh.head {
		sh.remove(e)
	}
	for sh.head != nil && (len(sh.m)+1 > sh.maxN || sh.bytes+need > sh.maxB) {
		sh.remove(sh.head)
		sh.evicted++
	}
	if len(sh.m)+1 > sh.maxN {
		// Full of running entries: drop those whose lease ended.
		for _, e := range sh.m {
			if !now.Before(e.expires) {
				sh.remove(e)
			}
		}
	}
}

func (e *memEntry) entry(now time.Time) Entry {
	return Entry{State: e.state, Fingerprint: e.fp, Left: e.expires.Sub(now), Answer: e.answer}
}

// Acquire implements [Store].
func (s *MemoryStore) Acquire(_ context.Context, key string, l Lease) (bool, Entry, error) {
	sh := s.shard(key)
	now := time.Now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.live(key, now); e != nil {
		return false, e.entry(now), nil
	}
	sh.sweep(now, 0)
	if len(sh.m)+1 > sh.maxN {
		return false, Entry{}, ErrStoreFull
	}
	sh.m[key] = &memEntry{key: key, state: Running, token: l.Token, fp: l.Fingerprint, expires: now.Add(l.TTL)}
	return true, Entry{}, nil
}

// Complete implements [Store]. An answer larger than the store's share of bytes for
// its key is refused with [ErrAnswerTooLarge].
func (s *MemoryStore) Complete(_ context.Context, key, token string, answer []byte, retain time.Duration) error {
	sh := s.shard(key)
	now := time.Now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.live(key, now)
	if e == nil || e.state != Running || e.token != token {
		return ErrLeaseLost
	}
	size := len(answer) + len(key)
	if size > sh.maxB {
		return ErrAnswerTooLarge
	}
	sh.sweep(now, size)
	e.state, e.answer, e.expires = Done, answer, now.Add(retain) // Complete's caller gives it up
	sh.bytes += size
	if sh.tail == nil {
		sh.head, sh.tail = e, e
	} else {
		e.prev, sh.tail.next, sh.tail = sh.tail, e, e
	}
	if e.done != nil {
		close(e.done)
		e.done = nil
	}
	return nil
}

// Release implements [Store].
func (s *MemoryStore) Release(_ context.Context, key, token string) error {
	sh := s.shard(key)
	now := time.Now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.live(key, now)
	if e == nil || e.state != Running || e.token != token {
		return ErrLeaseLost
	}
	sh.remove(e)
	return nil
}

// Get implements [Store].
func (s *MemoryStore) Get(_ context.Context, key string) (Entry, error) {
	sh := s.shard(key)
	now := time.Now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.live(key, now); e != nil {
		return e.entry(now), nil
	}
	return Entry{}, nil
}

// Wait implements [Store]: it is woken when the record completes or is released,
// or when its lease ends.
func (s *MemoryStore) Wait(ctx context.Context, key string) (Entry, error) {
	sh := s.shard(key)
	for {
		now := time.Now()
		sh.mu.Lock()
		e := sh.live(key, now)
		if e == nil || e.state != Running {
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
		ch, left := e.done, e.expires.Sub(now)
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
