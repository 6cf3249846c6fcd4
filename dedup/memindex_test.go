package dedup

import (
	"math/rand/v2"
	"testing"
)

// TestMemIndexProperty adds and removes records at random in an index, with
// hashes that share their top bits (runs that wrap around the table's end, and
// records of one hash), and checks after every step that each record held is
// found from its home before an empty slot, and that the count is right.
func TestMemIndexProperty(t *testing.T) {
	for _, spread := range []uint64{1, 3, 64, 1 << 32} {
		r := rand.New(rand.NewPCG(uint64(spread), 7))
		var x memIndex
		held := map[uint32]uint64{} // index → hash
		next := uint32(1)
		for step := range 20_000 {
			if len(held) > 0 && r.IntN(5) < 2 {
				for i, h := range held { // one at random: map order
					x.remove(h, i)
					delete(held, i)
					break
				}
			} else {
				h := r.Uint64N(spread)<<32 | r.Uint64N(1<<32)
				x.insert(h, next)
				held[next] = h
				next++
			}
			if x.n != len(held) {
				t.Fatalf("spread %d, step %d: n %d, want %d", spread, step, x.n, len(held))
			}
			if step%97 != 0 && step < 19_990 {
				continue
			}
			occupied := 0
			for _, s := range x.slots {
				if s != 0 {
					occupied++
				}
			}
			if occupied != len(held) || 4*occupied > 3*len(x.slots) {
				t.Fatalf("spread %d, step %d: %d slots of %d taken, %d held", spread, step, occupied, len(x.slots), len(held))
			}
			for i, h := range held {
				if !x.reaches(h, i) {
					t.Fatalf("spread %d, step %d: record %d (hash %#x) not found from its home", spread, step, i, h)
				}
			}
		}
	}
}

// reaches reports whether a lookup of h meets the record at i before an empty slot.
func (x *memIndex) reaches(h uint64, i uint32) bool {
	mask := len(x.slots) - 1
	for p := x.home(h); x.slots[p] != 0; p = (p + 1) & mask {
		if x.slots[p] == indexSlot(h, i) {
			return true
		}
	}
	return false
}
