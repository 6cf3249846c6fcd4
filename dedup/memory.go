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
// keeps. One answer may take at most 1/32 of it (and at most 4 GiB): a larger one
// is refused with [ErrAnswerTooLarge], so that no single answer evicts more than a
// small share of the others. Default [DefaultMaxBytes] (64 MiB).
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

// A shard holds its records without a pointer for the garbage collector to follow,
// however many it holds: the records are numbers in chunks of a slice, found by
// their key's hash in a table of numbers ([memIndex]), and their keys, fingerprints, tokens and
// answers are bytes in chunks ([memBytes]). Bytes an [Entry] may hold (a
// fingerprint, an answer) are never written again, so it may hold them after the
// shard's lock is released.
type memShard struct {
	mu    sync.Mutex
	idx   memIndex               // the records by their key's hash, as indices in recs
	recs  []*[memRecChunk]memRec // record i is recs[i/memRecChunk][i%memRecChunk]
	nrecs uint32                 // indices given out; 0 is no record ("none" in the lists)
	free  []uint32               // indices of no record, for the next one
	b     memBytes
	// waits has the channel closed when the running record at an index stops
	// running, made on the first Wait for it.
	waits      map[uint32]chan struct{}
	head, tail uint32 // done records, oldest completed first
	bytes      int64
	// oldest is head's completion sequence number (math.MaxUint64 when there is no
	// head), read without the lock to find the store's oldest answer.
	oldest atomic.Uint64
	_      [16]byte // keep shards on their own cache lines
}

// memRec is a record: its key then its fingerprint at k in its shard's bytes, its
// token (running) or answer (done) at v.
type memRec struct {
	hash       uint64
	expires    int64  // on the store's clock ([MemoryStore.clock])
	seq        uint64 // done: completion order, from 1
	k, v       memRef
	klen, flen uint32
	vlen       uint32
	prev, next uint32 // done records, as indices
	state      State  // Absent: no record (its index is free)
	packed     bool   // the fingerprint's flen bytes are its hex digits' ([packedLen])
}

const memRecChunk = 256

// memMaxValue bounds a key, a fingerprint, a token and an answer, whose lengths a
// record keeps in 32 bits.
const memMaxValue = math.MaxUint32

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
		s.shards[i].nrecs = 1
		s.shards[i].b.fill = -1
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
		st.Entries += sh.idx.n
		st.Bytes += int(sh.bytes)
		sh.mu.Unlock()
	}
	return st
}

// clock is the time on the store's clock: nanoseconds since the store was made, on
// the monotonic clock. A record's end is one int64, not a time.Time (24 bytes, with
// a pointer): smaller records for the whole retention.
func (s *MemoryStore) clock() int64 { return int64(time.Since(s.epoch)) }

// at is t, read from the monotonic clock, on the store's clock.
func (s *MemoryStore) at(t time.Time) int64 { return int64(t.Sub(s.epoch)) }

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

// rec is the record at i.
func (sh *memShard) rec(i uint32) *memRec { return &sh.recs[i/memRecChunk][i%memRecChunk] }

// key is the key of the record at i.
func (sh *memShard) key(i uint32) []byte {
	r := sh.rec(i)
	return sh.b.at(r.k, r.klen)
}

// value is the token or the answer of the record at i.
func (sh *memShard) value(i uint32) []byte {
	r := sh.rec(i)
	return sh.b.at(r.v, r.vlen)
}

// get returns the index of key's record, whose hash is h, expired or not; 0 for
// none.
func (sh *memShard) get(h uint64, key string) uint32 {
	x := &sh.idx
	if x.n == 0 {
		return 0
	}
	mask := len(x.slots) - 1
	for p := x.home(h); ; p = (p + 1) & mask {
		s := x.slots[p]
		if s == 0 {
			return 0
		}
		if i := uint32(s); s>>32 == h>>32 && sh.rec(i).hash == h && string(sh.key(i)) == key {
			return i
		}
	}
}

// grow adds n bytes, which the caller writes into dst; first, when a new chunk is
// needed and the chunks hold more than twice the bytes records hold, it moves
// those to new chunks.
func (sh *memShard) grow(n int) (memRef, []byte) {
	if !sh.b.fits(n) && sh.b.held > 2*sh.b.used+4*memChunk {
		sh.compact()
	}
	return sh.b.grow(n)
}

// compact moves the bytes records hold to new chunks, and leaves the others.
func (sh *memShard) compact() {
	old := sh.b
	sh.b = memBytes{fill: -1}
	for i := uint32(1); i < sh.nrecs; i++ {
		r := sh.rec(i)
		if r.state == Absent {
			continue
		}
		k, v := old.at(r.k, r.klen+r.flen), old.at(r.v, r.vlen)
		var dst []byte
		r.k, dst = sh.b.grow(len(k))
		copy(dst, k)
		r.v, dst = sh.b.grow(len(v))
		copy(dst, v)
	}
}

// put adds a running record of key, whose hash is h and which sh does not hold,
// and returns its index.
func (sh *memShard) put(h uint64, key string, l Lease, expires int64, sum []byte) uint32 {
	flen, packed := len(sum), true
	if sum == nil {
		flen, packed = packedLen(l.Fingerprint)
	}
	r := memRec{hash: h, expires: expires, klen: uint32(len(key)), flen: uint32(flen), vlen: uint32(len(l.Token)), state: Running, packed: packed}
	ref, dst := sh.grow(len(key) + flen + len(l.Token)) // one place: a move in between would leave one behind
	n := copy(dst, key)
	if sum != nil {
		copy(dst[n:], sum)
	} else {
		pack(dst[n:n+flen], l.Fingerprint, packed)
	}
	n += flen
	copy(dst[n:], l.Token)
	r.k, r.v = ref, memRef{ref.chunk, ref.off + uint32(n)}
	var i uint32
	if k := len(sh.free); k > 0 {
		i, sh.free = sh.free[k-1], sh.free[:k-1]
	} else {
		i = sh.nrecs
		sh.nrecs++
		if i/memRecChunk == uint32(len(sh.recs)) {
			sh.recs = append(sh.recs, new([memRecChunk]memRec))
		}
	}
	*sh.rec(i) = r
	sh.idx.insert(h, i)
	return i
}

// live returns the index of key's record (its hash h) if it has not expired,
// removing it if it has; 0 for none.
func (s *MemoryStore) live(sh *memShard, h uint64, key string, now int64) uint32 {
	i := sh.get(h, key)
	if i == 0 {
		return 0
	}
	if now < sh.rec(i).expires {
		return i
	}
	s.remove(sh, i)
	return 0
}

// remove takes the record at i out of sh and out of the store's counts.
func (s *MemoryStore) remove(sh *memShard, i uint32) {
	r := sh.rec(i)
	sh.idx.remove(r.hash, i)
	s.entries.Add(-1)
	if r.state == Done {
		sh.unlink(i)
		size := int64(r.vlen + r.klen)
		sh.bytes -= size
		s.bytes.Add(-size)
	}
	sh.b.free(r.k, r.klen+r.flen)
	sh.b.free(r.v, r.vlen)
	*r = memRec{}
	sh.free = append(sh.free, i)
	sh.wake(i)
}

// wake closes the channel of those waiting for the record at i to stop running.
func (sh *memShard) wake(i uint32) {
	if ch, ok := sh.waits[i]; ok {
		close(ch)
		delete(sh.waits, i)
	}
}

func (sh *memShard) append(i uint32) {
	r := sh.rec(i)
	if sh.tail == 0 {
		sh.head, sh.tail = i, i
		sh.oldest.Store(r.seq)
		return
	}
	r.prev = sh.tail
	sh.rec(sh.tail).next = i
	sh.tail = i
}

func (sh *memShard) unlink(i uint32) {
	r := sh.rec(i)
	if r.prev != 0 {
		sh.rec(r.prev).next = r.next
	} else {
		sh.head = r.next
		if sh.head != 0 {
			sh.oldest.Store(sh.rec(sh.head).seq)
		} else {
			sh.oldest.Store(math.MaxUint64)
		}
	}
	if r.next != 0 {
		sh.rec(r.next).prev = r.prev
	} else {
		sh.tail = r.prev
	}
	r.prev, r.next = 0, 0
}

// sweep removes sh's expired answers from its front.
func (s *MemoryStore) sweep(sh *memShard, now int64) {
	for i := sh.head; i != 0 && now >= sh.rec(i).expires; i = sh.head {
		s.remove(sh, i)
	}
}

// entry is the record at i as an [Entry]: its answer is the shard's bytes, which
// are never written again, and so is its fingerprint, or want when that is the
// fingerprint and the record keeps it packed ([unpack]): sum, when given, is the
// bytes want spells.
func (sh *memShard) entry(i uint32, now int64, want string, sum []byte) Entry {
	r := sh.rec(i)
	e := Entry{State: r.state, Left: time.Duration(r.expires - now)}
	if r.flen > 0 {
		e.Fingerprint = unpack(sh.b.at(r.k, r.klen+r.flen)[r.klen:], r.packed, want, sum)
	}
	if r.state == Done {
		e.Answer = sh.value(i)
	}
	return e
}

// token reports whether the record at i runs with token.
func (sh *memShard) token(i uint32, token string) bool {
	return i != 0 && sh.rec(i).state == Running && string(sh.value(i)) == token
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
		i := sh.head // the oldest, unless another call took it since
		if i != 0 {
			if now < sh.rec(i).expires {
				s.evicted.Add(1)
			}
			s.remove(sh, i)
		}
		sh.mu.Unlock()
		if i != 0 {
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
		for j := uint32(1); j < sh.nrecs; j++ {
			switch r := sh.rec(j); {
			case r.state != Running:
			case now >= r.expires:
				s.remove(sh, j)
				reaped = true
			default:
				s.leaseEnds(r.expires)
			}
		}
		sh.mu.Unlock()
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
	return s.acquire(key, l, s.clock(), nil)
}

// acquireAt is Acquire for a caller that read the clock when it computed the
// lease's TTL: the lease then ends exactly TTL after that reading, and the store
// spares a clock read of its own. sum is the bytes l.Fingerprint's lowercase hex
// digits spell (the middleware's SHA-256), which the store keeps as they are
// instead of decoding the digits.
func (s *MemoryStore) acquireAt(key string, l Lease, now time.Time, sum []byte) (bool, Entry, error) {
	return s.acquire(key, l, s.at(now), sum)
}

// acquire is Acquire at now, on the store's clock, with the fingerprint's bytes
// when the caller has them (nil otherwise: [MemoryStore.acquireAt]).
func (s *MemoryStore) acquire(key string, l Lease, now int64, sum []byte) (bool, Entry, error) {
	h := s.hash(key)
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i := s.live(sh, h, key, now); i != 0 {
		return false, sh.entry(i, now, l.Fingerprint, sum), nil
	}
	s.sweep(sh, now)
	if s.entries.Add(1) > s.maxEntries {
		// Make room with no shard's lock held (dropOldest takes another's), then
		// look at the key again.
		sh.mu.Unlock()
		room := s.dropOldest(now) || s.reapLeases(now)
		sh.mu.Lock()
		if i := s.live(sh, h, key, now); i != 0 || !room {
			s.entries.Add(-1)
			if i != 0 {
				return false, sh.entry(i, now, l.Fingerprint, sum), nil
			}
			return false, Entry{}, ErrStoreFull
		}
	}
	expires := after(now, l.TTL)
	sh.put(h, key, l, expires, sum)
	s.leaseEnds(expires)
	return true, Entry{}, nil
}

// Complete implements [Store]. It adds no record, so it evicts only for bytes: the
// oldest answers, while the store's bytes and the new answer's would pass
// [WithMaxBytes]. An answer (with its key) of more than 1/32 of WithMaxBytes is
// refused with [ErrAnswerTooLarge]. It keeps a copy of answer.
func (s *MemoryStore) Complete(_ context.Context, key, token string, answer []byte, retain time.Duration) error {
	h := s.hash(key)
	sh := s.shard(h)
	now := s.clock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := s.live(sh, h, key, now)
	if !sh.token(i, token) {
		return ErrLeaseLost
	}
	size := int64(len(answer) + len(key))
	if size > (s.maxBytes+memAnswerShare-1)/memAnswerShare || len(answer) > memMaxValue {
		return ErrAnswerTooLarge
	}
	if s.bytes.Add(size) > s.maxBytes {
		sh.mu.Unlock()
		fits := s.dropUntilFits(now)
		sh.mu.Lock()
		if i = s.live(sh, h, key, now); !sh.token(i, token) {
			s.bytes.Add(-size)
			return ErrLeaseLost
		}
		if !fits { // the bytes are other completions' still under way
			s.bytes.Add(-size)
			return ErrAnswerTooLarge
		}
	}
	if r := sh.rec(i); sh.b.unwrite(r.v, r.vlen) {
		// The token was the last bytes written (no other record came to the shard
		// while the request ran, the common case): the answer takes its place,
		// and the shard keeps no dead token for the whole retention.
		r.v, r.vlen = memRef{}, 0
	}
	ref, dst := sh.grow(len(answer))
	copy(dst, answer)
	r := sh.rec(i) // after grow, which may move its token
	sh.b.free(r.v, r.vlen)
	r.v, r.vlen = ref, uint32(len(answer))
	r.expires, r.seq, r.state = after(now, retain), s.seq.Add(1), Done
	sh.bytes += size
	sh.append(i)
	sh.wake(i)
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
	i := s.live(sh, h, key, now)
	if !sh.token(i, token) {
		return ErrLeaseLost
	}
	s.remove(sh, i)
	return nil
}

// Get implements [Store].
func (s *MemoryStore) Get(_ context.Context, key string) (Entry, error) {
	h := s.hash(key)
	sh := s.shard(h)
	now := s.clock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i := s.live(sh, h, key, now); i != 0 {
		return sh.entry(i, now, "", nil), nil
	}
	return Entry{}, nil
}

// Wait implements [Store]: it is woken when the record completes or is released,
// or when its lease ends.
func (s *MemoryStore) Wait(ctx context.Context, key string) (Entry, error) {
	return s.wait(ctx, key, "")
}

// wait is Wait for a caller that expects the fingerprint fp: an entry with it
// carries fp itself, not a copy ([unpack]).
func (s *MemoryStore) wait(ctx context.Context, key, fp string) (Entry, error) {
	h := s.hash(key)
	sh := s.shard(h)
	for {
		now := s.clock()
		sh.mu.Lock()
		i := s.live(sh, h, key, now)
		if i == 0 || sh.rec(i).state != Running {
			var cur Entry
			if i != 0 {
				cur = sh.entry(i, now, fp, nil)
			}
			sh.mu.Unlock()
			return cur, nil
		}
		ch := sh.waits[i]
		if ch == nil {
			if sh.waits == nil {
				sh.waits = map[uint32]chan struct{}{}
			}
			ch = make(chan struct{})
			sh.waits[i] = ch
		}
		left := time.Duration(sh.rec(i).expires - now)
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
