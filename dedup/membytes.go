package dedup

// memChunk is the size of the chunks a [MemoryStore]'s shard keeps its bytes in;
// a value larger than memLarge has a chunk of its own, of its size.
const (
	memChunk = 64 << 10
	memLarge = memChunk / 8
)

// memRef is where a record's bytes are in its shard's [memBytes].
type memRef struct{ chunk, off uint32 }

// memBytes are a shard's keys, fingerprints, tokens and answers, in chunks: new
// bytes go at the end of the chunk being filled, or in a new chunk, so that
// nothing is moved as the shard grows. A chunk whose bytes no record holds any
// longer is dropped; when the chunks hold more than twice the bytes records hold,
// the shard moves those to new chunks ([memShard.compact]). Bytes once written are
// never written again, but for a lease's token, which nothing reads outside the
// shard's lock: when they are the last bytes written, its answer takes their place
// ([memBytes.unwrite]).
type memBytes struct {
	chunks [][]byte // nil: a dropped chunk, whose index is in spare
	live   []int    // the bytes records hold in each chunk
	spare  []uint32
	fill   int // the chunk being filled; -1 for none
	held   int // the capacity of the chunks
	used   int // the bytes records hold
}

// fits reports whether n bytes fit without a new chunk of memChunk bytes.
func (m *memBytes) fits(n int) bool {
	return n > memLarge || (m.fill >= 0 && len(m.chunks[m.fill])+n <= cap(m.chunks[m.fill]))
}

// grow adds n bytes, which the caller writes into dst (none for 0).
func (m *memBytes) grow(n int) (ref memRef, dst []byte) {
	if n == 0 {
		return memRef{}, nil
	}
	c := m.fill
	switch {
	case n > memLarge:
		c = m.newChunk(n)
	case !m.fits(n):
		c = m.newChunk(memChunk)
		m.fill = c
	}
	b := m.chunks[c]
	off := len(b)
	m.chunks[c] = b[:off+n]
	m.live[c] += n
	m.used += n
	return memRef{uint32(c), uint32(off)}, b[off : off+n : off+n]
}

func (m *memBytes) newChunk(size int) int {
	b := make([]byte, 0, size)
	m.held += size
	if k := len(m.spare); k > 0 {
		c := m.spare[k-1]
		m.spare = m.spare[:k-1]
		m.chunks[c], m.live[c] = b, 0
		return int(c)
	}
	m.chunks = append(m.chunks, b)
	m.live = append(m.live, 0)
	return len(m.chunks) - 1
}

// unwrite gives back the n bytes at ref, and reports whether it could: only when
// they are the last bytes written in the chunk being filled, which the next grow
// then writes again. The caller must know that nothing outside the shard's lock
// holds them.
func (m *memBytes) unwrite(ref memRef, n uint32) bool {
	c := int(ref.chunk)
	if n == 0 || c != m.fill || len(m.chunks[c]) != int(ref.off+n) {
		return false
	}
	m.chunks[c] = m.chunks[c][:ref.off]
	m.live[c] -= int(n)
	m.used -= int(n)
	return true
}

// at returns the n bytes at ref (nil for 0), capped: an append to them cannot reach the next.
func (m *memBytes) at(ref memRef, n uint32) []byte {
	if n == 0 {
		return nil
	}
	end := ref.off + n
	return m.chunks[ref.chunk][ref.off:end:end]
}

// free gives up the n bytes at ref, and their chunk when no record holds any of
// its bytes (but the chunk being filled).
func (m *memBytes) free(ref memRef, n uint32) {
	if n == 0 {
		return
	}
	c := ref.chunk
	m.live[c] -= int(n)
	m.used -= int(n)
	if m.live[c] == 0 && int(c) != m.fill {
		m.held -= cap(m.chunks[c])
		m.chunks[c] = nil
		m.spare = append(m.spare, c)
	}
}
