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

// TransportResends records that the transport beneath wrote the header of the
// attempt's request wrote times (net/http's resend of a replayable request on a
// reused connection writes it again within one RoundTrip): every write after the
// first that was not a hedge's (the hedging layer beneath sends its copies under
// the attempt's context too, and records them with [HedgeCall] before the attempt
// returns) is a resend, recorded on the attempt's span and in its call's attempts.
func (a Attempt) TransportResends(ctx context.Context, wrote int) {
	c := callFrom(ctx)
	if c == nil {
		return
	}
	c.mu.Lock()
	hedges := c.hedges - c.hedgesSeen
	c.hedgesSeen = c.hedges
	n := wrote - 1 - hedges
	if n > 0 {
		c.resends += n
	}
	c.mu.Unlock()
	if n > 0 && a.st != nil {
		a.st.span.SetAttributes(otelattr.AttemptTransportResendsKey.Int(n))
	}
}
