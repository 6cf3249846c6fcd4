package dedup

import (
	"encoding/hex"
	"unsafe"
)

// A fingerprint of lowercase hex digits (the middleware's: a SHA-256 in hex) is
// kept in a [MemoryStore] as the bytes they spell, half its length, and given back
// as the same string: the caller's own when it matches, so that a replay reads it
// without an allocation. Any other fingerprint is kept as it is.

// hexDigits are the lowercase hex digits, by value.
const hexDigits = "0123456789abcdef"

// packedLen is the bytes fp is kept in: half its length when it is lowercase hex
// digits (packed: encoding/hex gives them back as they were), its length otherwise.
func packedLen(fp string) (n int, packed bool) {
	if len(fp) == 0 || len(fp)%2 != 0 {
		return len(fp), false
	}
	for i := 0; i < len(fp); i++ {
		if c := fp[i]; c-'0' > 9 && c-'a' > 5 {
			return len(fp), false
		}
	}
	return len(fp) / 2, true
}

// pack writes into dst (packedLen's bytes) the bytes that fp's digits spell, or fp.
func pack(dst []byte, fp string, packed bool) {
	if !packed {
		copy(dst, fp)
		return
	}
	hex.Decode(dst, unsafe.Slice(unsafe.StringData(fp), len(fp))) // read only; valid digits
}

// unpack is the fingerprint kept in b, as it was given: want itself when it is
// that fingerprint (told by its bytes, sum, when the caller has them). An unpacked
// one is b's bytes, which are never written again.
func unpack(b []byte, packed bool, want string, sum []byte) string {
	if !packed {
		return unsafe.String(unsafe.SliceData(b), len(b))
	}
	if sum != nil && string(sum) == string(b) {
		return want
	}
	if sum == nil && len(want) == 2*len(b) {
		same := true
		for i, c := range b {
			if want[2*i] != hexDigits[c>>4] || want[2*i+1] != hexDigits[c&0xf] {
				same = false
				break
			}
		}
		if same {
			return want
		}
	}
	s := make([]byte, hex.EncodedLen(len(b)))
	hex.Encode(s, b)
	return unsafe.String(unsafe.SliceData(s), len(s))
}
