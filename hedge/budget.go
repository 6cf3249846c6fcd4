package hedge

import (
	"math"
	"sync/atomic"
)

// tokens is the account that caps hedges: each primary deposits ratio of a token,
// each hedge withdraws one. The balance is kept in millionths of a token, at most
// Burst tokens; a new account is full or empty.
type tokens struct {
	balance atomic.Int64
	deposit int64
}

const tokenUnit = 1_000_000

func newTokens(ratio float64, full bool) *tokens {
	t := &tokens{deposit: int64(math.Round(ratio * tokenUnit))}
	if t.deposit > 0 && full {
		t.balance.Store(Burst * tokenUnit)
	}
	return t
}

// pay records a primary.
func (t *tokens) pay() {
	if t.deposit <= 0 {
		return
	}
	for {
		b := t.balance.Load()
		if b >= Burst*tokenUnit {
			return
		}
		if t.balance.CompareAndSwap(b, min(b+t.deposit, Burst*tokenUnit)) {
			return
		}
	}
}

// take withdraws a token for a hedge, or reports false when less than one is left.
func (t *tokens) take() bool {
	for {
		b := t.balance.Load()
		if b < tokenUnit {
			return false
		}
		if t.balance.CompareAndSwap(b, b-tokenUnit) {
			return true
		}
	}
}

func (t *tokens) value() float64 { return float64(t.balance.Load()) / tokenUnit }

// refund gives back the token of a hedge that was not sent after all.
func (t *tokens) refund() {
	if t.deposit <= 0 {
		return
	}
	for {
		b := t.balance.Load()
		if t.balance.CompareAndSwap(b, min(b+tokenUnit, Burst*tokenUnit)) {
			return
		}
	}
}
