// Package attempts reads and writes grpc-previous-rpc-attempts (gRPC A6), the
// count of the attempts of a call sent before this one. Package retry writes it on
// every retry and reads it on the server side (the one-layer rule: a request that is
// itself a retry gets no retries of its own downstream); package hedge adds its
// copies to the count a layer above wrote; package propagate strips it from an
// untrusted caller's request. One parser and one formatter serve them all.
package attempts

import (
	"context"
	"strconv"
)

const (
	// Key is the gRPC metadata key, and the HTTP header name for http.Header's Get,
	// Set, Values and Del, which canonicalize it.
	Key = "grpc-previous-rpc-attempts"
	// Header is the HTTP header name in canonical form, for indexing an http.Header
	// map directly.
	Header = "Grpc-Previous-Rpc-Attempts"
)

// Max is the largest count [Parse] returns and [Format] writes: a larger well-formed
// count saturates to it. It only bounds the arithmetic (package hedge adds its copies
// to the count it received); any count of 1 or more says "this is a retry".
const Max = 1000

// Parse reads one grpc-previous-rpc-attempts value. The rule:
//
//   - spaces and tabs around the value are ignored (HTTP's optional white space);
//   - the value is ASCII decimal digits, with at most one leading '+' (what
//     strconv.Atoi accepts, and what earlier versions read);
//   - a number above [Max] counts as Max, as long as it fits in 64 bits;
//   - anything else (empty, negative, a sign alone, hex, other digits than ASCII,
//     a list, a number past 64 bits) is unreadable, and counts as 0.
//
// So a result of 0 means "not known to be a retry". An unreadable value is not
// taken as a retry because it is no evidence of one: the header comes from the
// caller, who can always omit it or send "1", so neither reading gives a hostile
// caller anything; but taking garbage for a retry would silently cost an honest
// request its retries, while taking it for a first attempt costs at most what the
// retry budget allows (every retry spends a token). Parse allocates nothing, however
// long v is.
func Parse(v string) int {
	i, j := 0, len(v)
	for i < j && (v[i] == ' ' || v[i] == '\t') {
		i++
	}
	for j > i && (v[j-1] == ' ' || v[j-1] == '\t') {
		j--
	}
	if i < j && v[i] == '+' {
		i++
	}
	if i == j {
		return 0
	}
	const cutoff = (1<<63 - 1) / 10
	var n uint64
	for ; i < j; i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0
		}
		d := uint64(c - '0')
		if n > cutoff || n == cutoff && d > (1<<63-1)%10 {
			return 0 // past 64 bits: unreadable
		}
		n = n*10 + d
	}
	if n > Max {
		return Max
	}
	return int(n)
}

// Format writes a count: n clamped to [0, [Max]], in decimal. Whatever it writes,
// [Parse] reads back as the same number.
func Format(n int) string {
	return strconv.Itoa(min(max(n, 0), Max))
}

// The chain rule of hedging. A call that a hedging layer may send again (a hedgeable
// call: idempotent, replayable, hedging on) carries the header
// deadlinekit-hedged-above, and so does every call a server makes while serving one:
// a copy of that call would run the whole subtree again, so hedging inside it only
// multiplies the load (1.15 per hop that hedges) and cannot help, its parent being
// slow. A retry's copy (grpc-previous-rpc-attempts ≥ 1, no mark) counts as covered as
// well; the last copy a hedging layer sends is marked not covered ([LastCopyValue]).
// Package propagate's server side reads them
// ([Covers]) and marks the request's context ([WithCovered]); package hedge sends
// such a context's calls once, with the header.
const (
	// CoveredKey is the gRPC metadata key of the mark, and the HTTP header name for
	// http.Header's methods, which canonicalize it.
	CoveredKey = "deadlinekit-hedged-above"
	// CoveredHeader is the HTTP header name in canonical form.
	CoveredHeader = "Deadlinekit-Hedged-Above"
	// CoveredValue is the mark's value on a call the layer above may send again.
	CoveredValue = "1"
	// LastCopyValue is the mark's value on the last copy a hedging layer sends: no
	// further copy of it will come, so its subtree is not covered, and the hops below
	// may hedge their own calls in it (a second stall inside the last copy is still
	// hedged once).
	LastCopyValue = "0"
)

// Covers reports whether an inbound request with the mark's value covered and the
// attempt count's value prev is covered by a layer above: a mark other than
// [LastCopyValue] (a hostile caller gains nothing from one but fewer hedges), or,
// with no mark, a count of 1 or more (a retry's copy).
func Covers(covered, prev string) bool {
	if covered != "" {
		return covered != LastCopyValue
	}
	return Parse(prev) > 0
}

type coveredKey struct{}

// WithCovered returns ctx marked as serving a request a layer above may send again.
func WithCovered(ctx context.Context) context.Context {
	if Covered(ctx) {
		return ctx
	}
	return context.WithValue(ctx, coveredKey{}, true)
}

// IsCoveredKey reports whether key is the context key of [WithCovered], for a
// context type of another package that carries the mark along with its own value
// (one allocation where two contexts would take two): its Value answers true for it.
func IsCoveredKey(key any) bool {
	_, ok := key.(coveredKey)
	return ok
}

// Covered reports whether ctx serves a request a layer above may send again
// ([WithCovered]).
func Covered(ctx context.Context) bool {
	v, _ := ctx.Value(coveredKey{}).(bool)
	return v
}
