package retry

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/deadlinekit/deadlinekit/internal/idempotency"
	"github.com/deadlinekit/deadlinekit/internal/keychain"
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

// callKey chooses the idempotency key of one logical call, whose caller set the
// values vs (of its Idempotency-Key header or idempotency-key metadata); write says
// the call is not idempotent. It returns the key to send in place of the caller's,
// or "" to send what the caller set (nothing, when vs is empty or blank).
//
// Under the run of a keyed request (package dedup puts a [keychain.Chain] on the
// handler's context), a write gets the next key derived from the request's key, by
// default, with or without [WithIdempotencyKeys], so that a re-run of the handler
// sends the same keys; and a caller's key that is the request's own key (forwarded
// metadata, a copied header) is replaced by the next derived key: sent as is, it
// would make the downstream take two writes for one. Any other key the caller set
// is kept. Outside such a run, only [WithIdempotencyKeys] gives keys.
func (c *config) callKey(ctx context.Context, vs []string, write bool) string {
	chain := keychain.From(ctx)
	if idempotency.Keyed(vs) {
		if chain != nil && chain.Forwarded(vs[0]) {
			return chain.Next()
		}
		return ""
	}
	switch {
	case chain != nil && write:
		return chain.Next()
	case c.keys == nil:
		return ""
	}
	return c.keys()
}
