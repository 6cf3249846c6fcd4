package retry

// Names for the tests of package retry_test only.

const (
	DefaultBudgetRatio        = defaultBudgetRatio
	DefaultBudgetMinPerSecond = defaultBudgetMinPerSecond
	DefaultBudgetTTL          = defaultBudgetTTL
)

// WithRandom sets the source of the jitter (see withRandom).
var WithRandom = withRandom

func (b *Budget) Deposit()          { b.deposit() }
func (b *Budget) TryWithdraw() bool { return b.tryWithdraw() }
