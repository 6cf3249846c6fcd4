package deadline

import (
	"context"
	"time"
)

// Policy says how to derive a downstream budget from an inbound one. It is plain data:
// the zero value passes the parent's deadline through unchanged, and every field is
// opt-in. Negative durations count as zero.
//
//	reserve        = Reserve + ReserveFraction × left, at most MaxReserveFraction × left
//	child deadline = min(parent deadline − reserve, now + MaxPerHop)
type Policy struct {
	// Reserve is time kept back from the downstream for the caller's own work after
	// the downstream answers.
	Reserve time.Duration
	// ReserveFraction is a further share of the time left kept back, in [0, 1]
	// (values outside are clamped). 0.1 keeps 10% of what is left.
	ReserveFraction float64
	// MaxReserveFraction bounds the reserve at a share of the time left, in [0, 1]
	// (values outside are clamped; zero: no bound), so that a fixed Reserve does not
	// eat a short budget: with Reserve 5 ms and 0.1, a call with 200 ms left keeps
	// 5 ms, one with 20 ms left keeps 2 ms. Down a chain, a fixed reserve is taken
	// at every hop; a bounded one leaves each hop at least (1 − share) of what it got.
	MaxReserveFraction float64
	// MaxPerHop caps the budget of any one downstream call. Zero means no cap.
	MaxPerHop time.Duration
	// Floor is the least budget worth sending downstream. When the child's budget
	// would be below it, Derive returns a *BudgetError instead. Zero means any
	// positive budget is sent.
	Floor time.Duration
	// Default is the budget used when the parent has no deadline. Zero leaves such a
	// context without deadline (MaxPerHop still applies).
	Default time.Duration
}

// DefaultPolicy is the policy most services want for their outbound calls: the time
// left passes through unchanged, and a context without deadline gets [DefaultBudget].
var DefaultPolicy = Policy{Default: DefaultBudget}

// Budget computes the child's budget from the time left on the parent (has is false
// when the parent has no deadline). It reports ok = false when the child gets no
// deadline at all (no parent deadline, no Default, no MaxPerHop). It returns a
// *BudgetError when the budget would be zero, negative or below Floor.
func (p Policy) Budget(left time.Duration, has bool) (budget time.Duration, ok bool, err error) {
	if !has {
		budget = max(p.Default, 0)
		if p.MaxPerHop > 0 && (budget == 0 || p.MaxPerHop < budget) {
			budget = p.MaxPerHop
		}
		if budget == 0 {
			return 0, false, nil
		}
		// A default budget is a fresh allowance, not an inbound one: the reserve
		// is not taken from it, but the floor still applies.
		return budget, true, p.checkFloor(budget, budget, 0)
	}
	r := p.reserve(left)
	budget = left - r
	if p.MaxPerHop > 0 && p.MaxPerHop < budget {
		budget = p.MaxPerHop
	}
	return budget, true, p.checkFloor(budget, left, r)
}

func (p Policy) reserve(left time.Duration) time.Duration {
	r := max(p.Reserve, 0)
	if f := min(max(p.ReserveFraction, 0), 1); f > 0 && left > 0 {
		r += time.Duration(float64(left) * f)
	}
	if f := min(max(p.MaxReserveFraction, 0), 1); f > 0 && left > 0 {
		r = min(r, time.Duration(float64(left)*f))
	}
	return r
}

// checkFloor refuses a child budget below the floor. The error states the time the
// caller had left and what the step needs of it, the reserve included: "deadline
// passed" only when it had.
func (p Policy) checkFloor(budget, left, reserve time.Duration) error {
	floor := max(p.Floor, 0)
	if budget <= 0 || budget < floor {
		return &BudgetError{Remaining: left, Needed: floor + reserve, Reserve: reserve}
	}
	return nil
}

// Derive returns a child of ctx whose deadline follows the policy, or a *BudgetError
// (and ctx itself with a no-op cancel) when the child's budget would be below Floor or
// nothing is left. The child's deadline is never later than ctx's. When the policy
// gives the child no deadline, or none earlier than ctx's, the child is ctx itself and
// cancel is a no-op (no allocation).
//
// The child deadline is computed on the parent's deadline (parent − reserve), not on
// "now + budget", so the time spent between the two readings of the clock is never
// handed out twice.
func (p Policy) Derive(ctx context.Context) (context.Context, context.CancelFunc, error) {
	parent, has := ctx.Deadline()
	var left time.Duration
	if has {
		left = time.Until(parent) // the monotonic clock alone: half the price of time.Now
	}
	budget, ok, err := p.Budget(left, has)
	if err != nil {
		return ctx, noop, err
	}
	if !ok {
		return ctx, noop, nil
	}
	if !has {
		child, cancel := context.WithTimeout(ctx, budget)
		return child, cancel, nil
	}
	if budget >= left {
		// Nothing is kept back and no cap bites: the parent's deadline stands.
		return ctx, noop, nil
	}
	child, cancel := context.WithDeadline(ctx, parent.Add(budget-left))
	return child, cancel, nil
}

func noop() {}
