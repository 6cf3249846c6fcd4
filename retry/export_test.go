package retry

import "github.com/deadlinekit/deadlinekit/criticality"

// Names for the tests of package retry_test only.

const (
	DefaultBudgetRatio        = defaultBudgetRatio
	DefaultBudgetMinPerSecond = defaultBudgetMinPerSecond
	DefaultBudgetTTL          = defaultBudgetTTL
)

// WithRandom sets the source of the jitter (see withRandom).
var WithRandom = withRandom

func (b *Budget) Deposit()          { b.deposit(criticality.Critical) }
func (b *Budget) TryWithdraw() bool { return b.tryWithdraw(criticality.Critical) }

func (b *Budget) DepositAt(l criticality.Level)          { b.deposit(l) }
func (b *Budget) TryWithdrawAt(l criticality.Level) bool { return b.tryWithdraw(l) }
