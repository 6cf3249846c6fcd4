package dedup

// memIndex finds a shard's records by their key's hash, with no pointer for the
// garbage collector to follow: an open-addressing table of slots, each the top 32
// bits of a record's hash above its index (0: an empty slot), probed linearly from
// the slot those bits pick, and at most 3/4 full. A lookup, a new key's too,
// mostly reads one cache line of it: eight slots. Records whose keys share a hash
// are in one run of slots, told apart by their keys ([memShard.get]).
type memIndex struct {
	slots []uint64 // a power of two of them, or none
	n     int      // records held
}

// memIndexMin is the slots of a shard's first table.
const memIndexMin = 64

// indexSlot is the slot of the record at i, whose key's hash is h.
func indexSlot(h uint64, i uint32) uint64 { return h&^(1<<32-1) | uint64(i) }

// home is the first slot probed for a hash, or a slot, v: its top 32 bits pick it.
func (x *memIndex) home(v uint64) int { return int(v>>32) & (len(x.slots) - 1) }

// insert adds the record at i, whose key's hash is h.
func (x *memIndex) insert(h uint64, i uint32) {
	if 4*(x.n+1) > 3*len(x.slots) {
		x.grow()
	}
	x.place(indexSlot(h, i))
	x.n++
}

// place puts slot s in the first empty slot from its home.
func (x *memIndex) place(s uint64) {
	mask := len(x.slots) - 1
	p := x.home(s)
	for x.slots[p] != 0 {
		p = (p + 1) & mask
	}
	x.slots[p] = s
}

// grow moves the slots to a table twice as large.
func (x *memIndex) grow() {
	old := x.slots
	x.slots = make([]uint64, max(2*len(old), memIndexMin))
	for _, s := range old {
		if s != 0 {
			x.place(s)
		}
	}
}

// remove takes out the record at i, whose key's hash is h, which it holds. The
// slots after it in its run move up where their lookups still find them (no slot
// of a run is left empty before a record whose lookup passes it): no tombstones.
func (x *memIndex) remove(h uint64, i uint32) {
	mask := len(x.slots) - 1
	s := indexSlot(h, i)
	p := x.home(s)
	for x.slots[p] != s {
		p = (p + 1) & mask
	}
	for q := (p + 1) & mask; x.slots[q] != 0; q = (q + 1) & mask {
		// The slot at q may move to p when p is between its home and q.
		if (q-x.home(x.slots[q]))&mask >= (q-p)&mask {
			x.slots[p] = x.slots[q]
			p = q
		}
	}
	x.slots[p] = 0
	x.n--
}
