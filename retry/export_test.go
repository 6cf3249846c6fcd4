package retry

import (
	"context"

	"github.com/deadlinekit/deadlinekit/criticality"
)

// Names for the tests of package retry_test only.

const (
	DefaultBudgetRatio        = defaultBudgetRatio
	DefaultBudgetMinPerSecond = defaultBudgetMinPerSecond
	DefaultBudgetTTL          = defaultBudgetTTL
)

// WithRandom sets the source of the jitter (see withRandom).
var WithRandom = withRandom

func (b *Budget) Deposit() { b.deposit(context.Background()) }
func (b *Budget) TryWithdraw() bool {
	_, ok := b.tryWithdraw(context.Background())
	return ok
}

func (b *Budget) DepositAt(l criticality.Level) { b.deposit(criticality.With(context.Background(), l)) }
func (b *Budget) TryWithdrawAt(l criticality.Level) bool {
	_, ok := b.tryWithdraw(criticality.With(context.Background(), l))
	return ok
}
