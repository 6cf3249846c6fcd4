package dedup

// NarrowHash makes the keys of s share 1<<bits hashes, so that most records meet
// another key's record under their hash: the path a full hash almost never takes.
// Call it before s is used.
func NarrowHash(s *MemoryStore, bits uint) { s.mask = 1<<bits - 1 }

// WrittenBytes returns the bytes the shards of s have written into their chunks,
// and how many of them its records hold.
func WrittenBytes(s *MemoryStore) (written, held int) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, c := range sh.b.chunks {
			written += len(c)
		}
		held += sh.b.used
		sh.mu.Unlock()
	}
	return written, held
}
