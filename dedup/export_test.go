package dedup

// NarrowHash makes the keys of s share 1<<bits hashes, so that most records meet
// another key's record under their hash: the path a full hash almost never takes.
// Call it before s is used.
func NarrowHash(s *MemoryStore, bits uint) { s.mask = 1<<bits - 1 }
