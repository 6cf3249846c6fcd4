package retry

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/deadlinekit/deadlinekit/criticality"
)

// The budget of a retry layer without [WithBudget]: retries may be 10% of the
// successes of the last 10 s, plus 10 retries per second (Finagle's floor) whatever
// the traffic.
const (
	defaultBudgetRatio        = 0.1
	defaultBudgetMinPerSecond = 10
	defaultBudgetTTL          = 10 * time.Second
)

// budgetSlots is the number of slices the TTL is cut into: an entry expires between
// TTL × (1 − 1/budgetSlots) and TTL after it was made.
const budgetSlots = 10

// milli is one retry in the budget's fixed-point unit.
const milli = 1000

// Budget is a retry budget: an account shared by all calls of a client that keeps
// retries to a fraction of the traffic. Each success deposits ratio of a token, each
// retry withdraws one token, and both expire after the TTL, so the balance is
//
//	minPerSecond × TTL + ratio × successes in the last TTL − retries in the last TTL
//
// and a retry is allowed only while it is at least one token, plus a headroom for
// each higher criticality level (package criticality) whose calls have used the
// budget within the TTL (one was answered, or asked for a retry): a lower level's
// retries stop first, and leave that much to the levels above (the SRE book's rule
// that a level is refused only once every lower one is). The headroom is a tenth of
// the reserve, at least one token: 10 retries with the defaults. A client whose
// calls are all of one level (the default's, say) has none. A level that has not
// used the budget for a TTL has no headroom kept for it: its first retry after
// that finds what the lower levels left. A level with k higher levels in use needs
// 1 + k tokens under a reserve of less than 10 (whose headroom is one token): a
// reserve under that leaves it only what successes deposit. With NewBudget(0, 0.1,
// 10*time.Second), a reserve of one retry per 10 s, a call of the default level
// does not retry while a CriticalPlus call has used the budget in the last 10 s.
//
// The reserve (minPerSecond × TTL) is there from the start: a new client may retry
// at once, and a client with little traffic may still retry minPerSecond times per
// second on average. In a sustained outage there are no successes, and retries fall
// to the floor. This is Finagle's RetryBudget.
//
// A Budget is safe for concurrent use. Build one with [NewBudget]; a nil *Budget
// allows every retry (no budget), which is what [WithBudget](nil) means.
// Time is read from the monotonic clock.
type Budget struct {
	perSuccess int64 // milli-tokens per success
	reserve    int64 // milli-tokens
	slot       time.Duration

	// origin is when the budget was made. The clock is read as the time since it,
	// from the monotonic clock alone (time.Since), at half the price of time.Now.
	origin time.Time

	headroom int64         // milli-tokens a retry leaves for each higher level in use
	ttl      time.Duration // how long a level stays in use after its last call

	mu    sync.Mutex
	slots [budgetSlots]int64 // milli-tokens deposited (positive) and withdrawn (negative) per slice
	cur   int                // index of the current slice
	start time.Duration      // start of the current slice, since origin
	sum   int64              // sum of slots
	// used is, per level (Sheddable first), when a call of it last deposited or asked
	// for a retry, since origin; zero: never.
	used [levels]time.Duration
}

// levels is the number of criticality levels, Sheddable to CriticalPlus.
const levels = int(criticality.CriticalPlus-criticality.Sheddable) + 1

// levelIndex is l's index in Budget.used; a level outside the four is the default's.
func levelIndex(l criticality.Level) int {
	if !l.Valid() {
		l = criticality.Critical
	}
	return int(l - criticality.Sheddable)
}

// NewBudget returns a budget that allows retries up to ratio × the successes of the
// last ttl, plus minPerSecond retries per second (a reserve of minPerSecond × ttl
// tokens, full from the start). ratio is clamped to [0, 1000], minPerSecond to
// [0, 1e6]; a ttl of zero or less means 10 s. NaN counts as zero.
//
// NewBudget(0.1, 10, 10*time.Second) is the budget of a retry layer without
// [WithBudget].
func NewBudget(ratio, minPerSecond float64, ttl time.Duration) *Budget {
	if !(ratio > 0) {
		ratio = 0
	}
	ratio = min(ratio, 1000)
	if !(minPerSecond > 0) {
		minPerSecond = 0
	}
	minPerSecond = min(minPerSecond, 1e6)
	if ttl <= 0 {
		ttl = defaultBudgetTTL
	}
	ttl = min(ttl, 100*365*24*time.Hour)
	slot := max(ttl/budgetSlots, 1)
	reserve := int64(math.Round(minPerSecond * ttl.Seconds() * milli))
	return &Budget{
		perSuccess: int64(math.Round(ratio * milli)),
		reserve:    reserve,
		headroom:   max(reserve/budgetSlots, milli),
		ttl:        ttl,
		slot:       slot,
		origin:     time.Now(),
	}
}

// advance moves the ring to the present, forgetting the slices older than the TTL,
// and returns the present, since origin (at least 1 ns). b.mu held.
func (b *Budget) advance() time.Duration {
	now := max(time.Since(b.origin), 1)
	elapsed := now - b.start
	if elapsed < b.slot {
		return now
	}
	k := elapsed / b.slot
	if k >= budgetSlots {
		b.slots = [budgetSlots]int64{}
		b.sum = 0
		b.cur = 0
	} else {
		for range int(k) {
			b.cur = (b.cur + 1) % budgetSlots
			b.sum -= b.slots[b.cur]
			b.slots[b.cur] = 0
		}
	}
	b.start += k * b.slot
	return now
}

// deposit records one success of a call under ctx, at ctx's level: it adds ratio of
// a token, for the TTL. The retry layers call it for every attempt that the
// downstream answered ([Answered]).
func (b *Budget) deposit(ctx context.Context) {
	if b == nil {
		return
	}
	i := levelIndex(criticality.From(ctx))
	b.mu.Lock()
	b.used[i] = b.advance()
	b.slots[b.cur] += b.perSuccess
	b.sum += b.perSuccess
	b.mu.Unlock()
}

// tryWithdraw takes one token for a retry of a call under ctx, at ctx's level, and
// reports whether there was one, with the headroom of the higher levels in use left
// over, and when it was taken (since origin: the receipt [Budget.refund] needs). A
// false result means the retry must not be made. A nil *Budget always allows. The
// retry layers call it before waiting for a retry, and give the token back (refund)
// when the retry is not sent after all.
func (b *Budget) tryWithdraw(ctx context.Context) (at time.Duration, ok bool) {
	if b == nil {
		return 0, true
	}
	i := levelIndex(criticality.From(ctx))
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.advance()
	b.used[i] = now
	need := int64(milli)
	for _, t := range b.used[i+1:] {
		if t > 0 && now-t < b.ttl {
			need += b.headroom
		}
	}
	if b.reserve+b.sum < need {
		return 0, false
	}
	b.slots[b.cur] -= milli
	b.sum -= milli
	return now, true
}

// refund gives back the token taken at at (tryWithdraw's receipt) for a retry that
// was never sent (its call's context ended during the wait, or a layer beneath
// refused it before sending). The token goes back to the slice it was taken from,
// to expire with it, and not at all once that slice has: a wait can outlast a
// slice, or the whole TTL (a server's pushback), and a token given back to the
// present slice would outlive the withdrawal it cancels.
func (b *Budget) refund(at time.Duration) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.advance()
	if back := b.start/b.slot - at/b.slot; back < budgetSlots {
		i := (b.cur - int(back) + budgetSlots) % budgetSlots
		b.slots[i] += milli
		b.sum += milli
	}
	b.mu.Unlock()
}

// Balance returns the number of retries the budget would allow now (possibly
// fractional) to a call of a level with no higher level in use; a lower level's
// retries stop with the headroom of the levels above it left. A nil *Budget reports
// +Inf.
func (b *Budget) Balance() float64 {
	if b == nil {
		return math.Inf(1)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance()
	return float64(b.reserve+b.sum) / milli
}
