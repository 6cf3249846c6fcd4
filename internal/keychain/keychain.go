// Package keychain derives the idempotency keys of a handler's downstream writes
// from the key of the request it serves, so that a re-run of the handler (its first
// run's replica died after a write, its lease ended, a repeat runs it again) sends
// each downstream the key it sent the first time, and meets the stored answer
// instead of repeating the side effect.
//
// Package dedup puts a [Chain] on the context of a keyed request's run; package
// retry asks it for the key of each outbound write. The n-th write of a request
// gets the same key on every run: a SHA-256 of the inbound key in its scope and n.
// The scope never shows in a derived key.
package keychain

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"sync/atomic"
)

// Prefix starts every derived key, so that a downstream's logs tell them from a
// client's own keys.
const Prefix = "dk1."

// domain separates this derivation's hashes from any other use of SHA-256 on the
// same bytes.
const domain = "deadlinekit/keychain/v1\x00"

// Chain is the derivation state of one run of a keyed request: the hash of its
// scoped key (computed on the first key derived), its key as the caller sent it,
// and the count of keys derived so far.
// Safe for concurrent use.
type Chain struct {
	scoped  string
	inbound string
	n       atomic.Uint64
	// seed is computed on the first derivation (most runs write nothing) and kept
	// apart, so that a Chain stays small: dedup embeds it in every keyed request's
	// state, which must fit the allocator's small objects (512 B) to be cheap.
	seed atomic.Pointer[[sha256.Size]byte]
}

// Key is the context key of a run's chain: ctx.Value(Key{}) is the *Chain [From]
// returns. A context of its own may answer it (package dedup's run context does, so
// that a keyed run costs one context, not one per value).
type Key struct{}

// With returns ctx carrying a new chain for the run of the request whose store key
// (the key in its scope) is scoped and whose key, as parsed from the wire, is
// inbound.
func With(ctx context.Context, scoped, inbound string) context.Context {
	c := &Chain{}
	c.Init(scoped, inbound)
	return context.WithValue(ctx, Key{}, c)
}

// Init makes c, a zero Chain (one embedded in a larger value, never copied after),
// the chain of the run of the request whose store key is scoped and whose key, as
// parsed from the wire, is inbound: as [With]'s chain.
func (c *Chain) Init(scoped, inbound string) {
	c.scoped, c.inbound = scoped, inbound
}

// From returns the chain of ctx, or nil when ctx is not a keyed request's run.
func From(ctx context.Context) *Chain {
	c, _ := ctx.Value(Key{}).(*Chain)
	return c
}

// Next returns the key of the next keyed write of the run: the n-th call of Next
// on a run of the same scoped key returns the same key on every run.
func (c *Chain) Next() string {
	return c.derive('#', strconv.FormatUint(c.n.Add(1), 10))
}

// Labelled returns the key named label of the run: the same on every run of the
// same scoped key, whatever the order of the writes, and never one that Next
// returns.
func (c *Chain) Labelled(label string) string {
	return c.derive('@', label)
}

// derive hashes the seed, a tag that keeps the two families apart, and s: 47
// characters, "dk1." then 43 of unpadded base64url.
func (c *Chain) derive(tag byte, s string) string {
	seed := c.seed.Load()
	if seed == nil { // racing first derivations compute the same seed
		sum := sha256.Sum256([]byte(domain + c.scoped))
		c.seed.CompareAndSwap(nil, &sum)
		seed = c.seed.Load()
	}
	h := sha256.New()
	h.Write(seed[:])
	h.Write([]byte{tag})
	h.Write([]byte(s))
	var sum [sha256.Size]byte
	return Prefix + base64.RawURLEncoding.EncodeToString(h.Sum(sum[:0]))
}

// Forwarded reports whether v, the value of an outgoing Idempotency-Key header or
// idempotency-key metadata, is the inbound key: as a bare token or as a quoted
// string, with white space around it.
func (c *Chain) Forwarded(v string) bool {
	v = strings.Trim(v, " \t")
	if v == c.inbound {
		return true
	}
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return false
	}
	v = v[1 : len(v)-1]
	if !strings.Contains(v, `\`) {
		return v == c.inbound
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String() == c.inbound
}
