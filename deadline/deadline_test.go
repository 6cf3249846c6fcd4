package deadline_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
)

func TestRemaining(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if _, ok := deadline.Remaining(context.Background()); ok {
			t.Fatal("Remaining reports a deadline on context.Background")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel()
		if left, ok := deadline.Remaining(ctx); !ok || left != 250*time.Millisecond {
			t.Fatalf("Remaining = %v, %v; want 250ms, true", left, ok)
		}
		time.Sleep(100 * time.Millisecond)
		if left, _ := deadline.Remaining(ctx); left != 150*time.Millisecond {
			t.Fatalf("after 100ms Remaining = %v; want 150ms", left)
		}
		time.Sleep(200 * time.Millisecond)
		if left, _ := deadline.Remaining(ctx); left != -50*time.Millisecond {
			t.Fatalf("past the deadline Remaining = %v; want -50ms", left)
		}
	})
}

func TestCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if err := deadline.Check(context.Background(), time.Hour); err != nil {
			t.Fatalf("Check without deadline = %v; want nil", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		defer cancel()
		err := deadline.Check(ctx, 20*time.Millisecond)
		var be *deadline.BudgetError
		if !errors.As(err, &be) || be.Remaining != 5*time.Millisecond || be.Needed != 20*time.Millisecond {
			t.Fatalf("Check(5ms left, need 20ms) = %v; want BudgetError{5ms, 20ms}", err)
		}
		if !errors.Is(err, deadline.ErrInsufficientBudget) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v does not match ErrInsufficientBudget and context.DeadlineExceeded", err)
		}
		if err := deadline.Check(ctx, 5*time.Millisecond); err != nil {
			t.Fatalf("Check(5ms left, need 5ms) = %v; want nil", err)
		}
		time.Sleep(5 * time.Millisecond)
		if err := deadline.Check(ctx, 0); err == nil {
			t.Fatal("Check on an expired context with need 0 = nil; want an error")
		}
	})
}

func TestBudgetErrorMessage(t *testing.T) {
	for _, tc := range []struct {
		err  deadline.BudgetError
		want string
	}{
		{deadline.BudgetError{Remaining: 5 * time.Millisecond, Needed: 20 * time.Millisecond}, "insufficient time budget: 5ms left, need 20ms"},
		{deadline.BudgetError{Remaining: -3 * time.Millisecond, Needed: 0}, "insufficient time budget: deadline passed 3ms ago, need 0s"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q; want %q", got, tc.want)
		}
	}
}

func TestAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel()
		for _, tc := range []struct {
			name  string
			ctx   context.Context
			limit time.Duration
			want  time.Duration
			ok    bool
		}{
			{"limit below time left", ctx, 100 * time.Millisecond, 100 * time.Millisecond, true},
			{"limit above time left", ctx, time.Second, 250 * time.Millisecond, true},
			{"no limit", ctx, 0, 250 * time.Millisecond, true},
			{"no deadline", context.Background(), 100 * time.Millisecond, 100 * time.Millisecond, true},
			{"neither", context.Background(), 0, 0, false},
		} {
			got, ok := deadline.AttemptTimeout(tc.ctx, tc.limit)
			if got != tc.want || ok != tc.ok {
				t.Errorf("%s: AttemptTimeout = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
			}
		}
		// The last attempt gets what is left, not the full limit.
		time.Sleep(200 * time.Millisecond)
		if got, _ := deadline.AttemptTimeout(ctx, 100*time.Millisecond); got != 50*time.Millisecond {
			t.Fatalf("late AttemptTimeout = %v; want 50ms", got)
		}
		actx, acancel := deadline.WithAttemptTimeout(ctx, 100*time.Millisecond)
		defer acancel()
		if left, _ := deadline.Remaining(actx); left != 50*time.Millisecond {
			t.Fatalf("WithAttemptTimeout left %v; want 50ms", left)
		}
	})
}

func TestPolicyBudget(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name   string
		p      deadline.Policy
		left   time.Duration
		has    bool
		want   time.Duration
		ok     bool
		errNum *deadline.BudgetError
	}{
		{"zero policy passes through", deadline.Policy{}, 250 * ms, true, 250 * ms, true, nil},
		{"zero policy, no deadline", deadline.Policy{}, 0, false, 0, false, nil},
		{"absolute reserve", deadline.Policy{Reserve: 20 * ms}, 250 * ms, true, 230 * ms, true, nil},
		{"fraction reserve", deadline.Policy{ReserveFraction: 0.1}, 250 * ms, true, 225 * ms, true, nil},
		{"both reserves", deadline.Policy{Reserve: 5 * ms, ReserveFraction: 0.2}, 100 * ms, true, 75 * ms, true, nil},
		{"bounded reserve, long budget", deadline.Policy{Reserve: 5 * ms, MaxReserveFraction: 0.1}, 200 * ms, true, 195 * ms, true, nil},
		{"bounded reserve, short budget", deadline.Policy{Reserve: 5 * ms, MaxReserveFraction: 0.1}, 20 * ms, true, 18 * ms, true, nil},
		{"bounded reserve, both kinds", deadline.Policy{Reserve: 5 * ms, ReserveFraction: 0.5, MaxReserveFraction: 0.25}, 100 * ms, true, 75 * ms, true, nil},
		{"bound above 1 counts as 1", deadline.Policy{Reserve: 5 * ms, MaxReserveFraction: 7}, 20 * ms, true, 15 * ms, true, nil},
		{"negative bound: none", deadline.Policy{Reserve: 5 * ms, MaxReserveFraction: -1}, 20 * ms, true, 15 * ms, true, nil},
		{"fraction clamped to 1", deadline.Policy{ReserveFraction: 7}, 100 * ms, true, 0, true, &deadline.BudgetError{Remaining: 100 * ms, Needed: 100 * ms, Reserve: 100 * ms}},
		{"negative fraction ignored", deadline.Policy{ReserveFraction: -1}, 100 * ms, true, 100 * ms, true, nil},
		{"negative reserve ignored", deadline.Policy{Reserve: -time.Second}, 100 * ms, true, 100 * ms, true, nil},
		{"cap bites", deadline.Policy{MaxPerHop: 50 * ms}, 250 * ms, true, 50 * ms, true, nil},
		{"cap above left", deadline.Policy{MaxPerHop: time.Second}, 250 * ms, true, 250 * ms, true, nil},
		{"floor met", deadline.Policy{Floor: 20 * ms}, 20 * ms, true, 20 * ms, true, nil},
		{"below floor", deadline.Policy{Reserve: 10 * ms, Floor: 20 * ms}, 25 * ms, true, 15 * ms, true, &deadline.BudgetError{Remaining: 25 * ms, Needed: 30 * ms, Reserve: 10 * ms}},
		{"expired parent", deadline.Policy{}, -5 * ms, true, -5 * ms, true, &deadline.BudgetError{Remaining: -5 * ms}},
		{"default", deadline.DefaultPolicy, 0, false, deadline.DefaultBudget, true, nil},
		{"default capped", deadline.Policy{Default: time.Second, MaxPerHop: 100 * ms}, 0, false, 100 * ms, true, nil},
		{"cap without default", deadline.Policy{MaxPerHop: 100 * ms}, 0, false, 100 * ms, true, nil},
		{"default keeps no reserve", deadline.Policy{Default: time.Second, Reserve: 100 * ms}, 0, false, time.Second, true, nil},
		{"default below floor", deadline.Policy{Default: 10 * ms, Floor: 20 * ms}, 0, false, 10 * ms, true, &deadline.BudgetError{Remaining: 10 * ms, Needed: 20 * ms}},
	} {
		got, ok, err := tc.p.Budget(tc.left, tc.has)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: Budget = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
		if tc.errNum == nil {
			if err != nil {
				t.Errorf("%s: err = %v; want nil", tc.name, err)
			}
			continue
		}
		var be *deadline.BudgetError
		if !errors.As(err, &be) || *be != *tc.errNum {
			t.Errorf("%s: err = %#v; want %#v", tc.name, err, tc.errNum)
		}
	}
}

func TestDerive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		parent, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel()
		time.Sleep(100 * time.Millisecond) // the hop's own work

		p := deadline.Policy{Reserve: 10 * time.Millisecond, ReserveFraction: 0.2}
		child, ccancel, err := p.Derive(parent)
		if err != nil {
			t.Fatal(err)
		}
		defer ccancel()
		// 150ms left, reserve 10ms + 30ms: the child gets 110ms.
		if left, _ := deadline.Remaining(child); left != 110*time.Millisecond {
			t.Fatalf("child budget %v; want 110ms", left)
		}
		<-child.Done()
		if got := time.Since(start); got != 210*time.Millisecond {
			t.Fatalf("child ended at %v; want 210ms", got)
		}
		if parent.Err() != nil {
			t.Fatal("parent ended with the child")
		}

		// Zero policy: the parent itself comes back, no allocation of a new context.
		same, scancel, err := deadline.Policy{}.Derive(parent)
		scancel()
		if err != nil || same != parent {
			t.Fatalf("zero policy Derive = %v, %v; want the parent", same, err)
		}

		// Floor: 40ms left, floor 50ms.
		_, _, err = deadline.Policy{Floor: 50 * time.Millisecond}.Derive(parent)
		var be *deadline.BudgetError
		if !errors.As(err, &be) || be.Remaining != 40*time.Millisecond || be.Needed != 50*time.Millisecond {
			t.Fatalf("Derive below floor err = %v; want BudgetError{40ms, 50ms}", err)
		}

		// No deadline at all: the default applies.
		dctx, dcancel, err := deadline.DefaultPolicy.Derive(context.Background())
		defer dcancel()
		if left, ok := deadline.Remaining(dctx); err != nil || !ok || left != deadline.DefaultBudget {
			t.Fatalf("default Derive left %v, %v, %v; want %v", left, ok, err, deadline.DefaultBudget)
		}
		nctx, ncancel, err := deadline.Policy{}.Derive(context.Background())
		ncancel()
		if _, ok := nctx.Deadline(); ok || err != nil {
			t.Fatal("zero policy gave a deadline to a context that had none")
		}

		// Expired parent.
		time.Sleep(50 * time.Millisecond)
		if _, _, err := (deadline.Policy{}).Derive(parent); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Derive on an expired parent err = %v; want DeadlineExceeded", err)
		}
	})
}

// TestDeriveNeverLater is the property test: whatever the policy and the parent, a
// derived deadline is never later than the parent's, and never later than now plus the
// per-hop cap.
func TestDeriveNeverLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		dur := func() time.Duration {
			switch rng.IntN(4) {
			case 0:
				return 0
			case 1:
				return -time.Duration(rng.Int64N(int64(time.Second)))
			default:
				return time.Duration(rng.Int64N(int64(10 * time.Second)))
			}
		}
		for i := range 20000 {
			p := deadline.Policy{
				Reserve:         dur(),
				ReserveFraction: rng.Float64()*1.4 - 0.2,
				MaxPerHop:       dur(),
				Floor:           dur(),
				Default:         dur(),
			}
			parent := context.Background()
			var pcancel context.CancelFunc = func() {}
			hasParent := rng.IntN(5) > 0
			if hasParent {
				parent, pcancel = context.WithTimeout(parent, dur())
			}
			now := time.Now()
			child, cancel, err := p.Derive(parent)
			cd, cok := child.Deadline()
			pd, pok := parent.Deadline()
			if err == nil {
				if pok && (!cok || cd.After(pd)) {
					t.Fatalf("case %d: %+v: child deadline %v later than parent %v", i, p, cd, pd)
				}
				if p.MaxPerHop > 0 && (!cok || cd.After(now.Add(p.MaxPerHop))) {
					t.Fatalf("case %d: %+v: child deadline %v beyond the per-hop cap", i, p, cd)
				}
				if cok && p.Floor > 0 && cd.Sub(now) < p.Floor {
					t.Fatalf("case %d: %+v: child budget %v below the floor", i, p, cd.Sub(now))
				}
			} else if !errors.Is(err, deadline.ErrInsufficientBudget) {
				t.Fatalf("case %d: unexpected error %v", i, err)
			}
			cancel()
			pcancel()
		}
	})
}

func BenchmarkDerive(b *testing.B) {
	parent, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.Run("passthrough", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, c, _ := deadline.Policy{}.Derive(parent)
			c()
		}
	})
	b.Run("reserve", func(b *testing.B) {
		b.ReportAllocs()
		p := deadline.Policy{Reserve: time.Millisecond}
		for b.Loop() {
			_, c, _ := p.Derive(parent)
			c()
		}
	})
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{7912345 * time.Nanosecond, "7.9ms"},
		{20 * time.Millisecond, "20ms"},
		{19987 * time.Microsecond, "20ms"},
		{420 * time.Microsecond, "420µs"},
		{1234 * time.Nanosecond, "1µs"},
		{1534 * time.Millisecond, "1.53s"},
		{-3 * time.Millisecond, "-3ms"},
		{-1534 * time.Millisecond, "-1.53s"},
		{0, "0s"},
	} {
		if got := deadline.Format(tc.d); got != tc.want {
			t.Errorf("Format(%v) = %q; want %q", tc.d, got, tc.want)
		}
	}
}
