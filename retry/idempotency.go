package retry

import (
	"crypto/rand"
	"encoding/hex"
)

// newIdempotencyKey returns a new random UUID (version 4) in its text form, e.g.
// "0b6c3f5e-8a1d-4c2e-9f3a-7d5b1e0c4a26": 122 random bits from crypto/rand. It is the
// default generator of [WithIdempotencyKeys].
func newIdempotencyKey() string {
	var u [16]byte
	_, _ = rand.Read(u[:])  // never fails (crypto/rand crashes the program instead)
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // variant 10
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}
