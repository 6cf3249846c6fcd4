package record

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/deadlinekit/deadlinekit/otelattr"
)

// DedupAnswer is what a deduping server (package dedup) said of one attempt of a
// keyed call.
type DedupAnswer struct {
	Replayed bool          // the answer is the stored answer of the first with the key
	Conflict bool          // the first with the key still ran: 409 / ABORTED
	ComeBack time.Duration // the come-back the conflict said
}

// Dedup records d on the attempt's span and in the call of ctx, whose span gets
// the answer's replay marker, whether any attempt met a conflict, and the last
// conflict's come-back ([otelattr.DedupReplayedKey] and the others).
func (a Attempt) Dedup(ctx context.Context, d DedupAnswer) {
	if a.st != nil {
		a.st.span.SetAttributes(dedupAttrs(d.Replayed, d.Conflict, d.ComeBack)...)
	}
	if c := callFrom(ctx); c != nil {
		c.mu.Lock()
		c.dedupSeen, c.replayed = true, d.Replayed
		if d.Conflict {
			c.conflict, c.comeBack = true, d.ComeBack
		}
		c.mu.Unlock()
	}
}

func dedupAttrs(replayed, conflict bool, comeBack time.Duration) []attribute.KeyValue {
	kv := []attribute.KeyValue{otelattr.DedupReplayedKey.Bool(replayed), otelattr.DedupConflictKey.Bool(conflict)}
	if conflict {
		kv = append(kv, otelattr.DedupComeBackKey.Float64(millis(comeBack)))
	}
	return kv
}

// IdempotencyKey records the hash of key ([KeyHash]) on the span of the call of
// ctx: never the key itself.
func IdempotencyKey(ctx context.Context, key string) {
	if c := callFrom(ctx); c != nil {
		h := KeyHash(key)
		c.mu.Lock()
		c.keyHash = h
		c.mu.Unlock()
	}
}

// KeyHash is the first 16 hex digits of the SHA-256 of key.
func KeyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// TransportResends records that the transport beneath sent the attempt n more
// times by itself (net/http's resend of a replayable request on a reused
// connection): on the attempt's span, and in its call's attempts.
func (a Attempt) TransportResends(ctx context.Context, n int) {
	if n <= 0 {
		return
	}
	if a.st != nil {
		a.st.span.SetAttributes(otelattr.AttemptTransportResendsKey.Int(n))
	}
	if c := callFrom(ctx); c != nil {
		c.mu.Lock()
		c.resends += n
		c.mu.Unlock()
	}
}
