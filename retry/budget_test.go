package retry_test

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/retry"
)

func TestBudgetNewClientRetriesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := retry.NewBudget(retry.DefaultBudgetRatio, retry.DefaultBudgetMinPerSecond, retry.DefaultBudgetTTL)
		if got := b.Balance(); got != 100 {
			t.Fatalf("new default budget balance = %v; want 100 (10/s × 10 s)", got)
		}
		if !b.TryWithdraw() {
			t.Fatal("a new client's default budget refuses its first retry")
		}
	})
}

func TestBudgetDepositWithdraw(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := retry.NewBudget(0.1, 0, 10*time.Second)
		if b.TryWithdraw() {
			t.Fatal("empty budget without floor allowed a retry")
		}
		for range 9 {
			b.Deposit()
		}
		if b.TryWithdraw() {
			t.Fatal("9 successes at 10% allowed a retry")
		}
		b.Deposit()
		if !b.TryWithdraw() {
			t.Fatal("10 successes at 10% refused a retry")
		}
		if b.TryWithdraw() {
			t.Fatal("the token was spent twice")
		}
	})
}

// Deposits expire after the TTL; so do withdrawals, which refills the reserve.
func TestBudgetExpiryAndRefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := retry.NewBudget(0.1, 1, 10*time.Second) // reserve: 10 retries
		for range 100 {
			b.Deposit() // +10
		}
		if got := b.Balance(); got != 20 {
			t.Fatalf("balance = %v; want 20", got)
		}
		<-time.After(9 * time.Second)
		if got := b.Balance(); got != 20 {
			t.Fatalf("after 9 s balance = %v; want 20 (deposits still live)", got)
		}
		<-time.After(time.Second)
		if got := b.Balance(); got != 10 {
			t.Fatalf("after 10 s balance = %v; want 10 (deposits expired, reserve left)", got)
		}
		n := 0
		for b.TryWithdraw() {
			n++
		}
		if n != 10 {
			t.Fatalf("withdrew %d from the reserve; want 10", n)
		}
		<-time.After(5 * time.Second)
		if b.TryWithdraw() {
			t.Fatal("reserve refilled before the TTL")
		}
		<-time.After(5 * time.Second)
		if got := b.Balance(); got != 10 {
			t.Fatalf("after the TTL balance = %v; want the reserve (10) back", got)
		}
		// A long silence forgets everything at once.
		b.Deposit()
		<-time.After(time.Hour)
		if got := b.Balance(); got != 10 {
			t.Fatalf("after an hour balance = %v; want 10", got)
		}
	})
}

// Over a sustained outage (no successes) retries fall to the floor: minPerSecond.
func TestBudgetSustainedOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := retry.NewBudget(retry.DefaultBudgetRatio, retry.DefaultBudgetMinPerSecond, retry.DefaultBudgetTTL)
		const rps, seconds = 100, 60
		retries := 0
		for range seconds {
			for range rps {
				if b.TryWithdraw() { // every request fails once and wants a retry
					retries++
				}
				<-time.After(time.Second / rps)
			}
		}
		limit := retry.DefaultBudgetMinPerSecond * (seconds + 10) // floor × (outage + one TTL of reserve)
		t.Logf("sustained outage, %d rps for %d s (%d requests): %d retries (%.1f%% of requests; floor allows %d)",
			rps, seconds, rps*seconds, retries, 100*float64(retries)/float64(rps*seconds), limit)
		if retries > limit {
			t.Fatalf("%d retries; want ≤ %d", retries, limit)
		}
	})
}

// Exact accounting under 64 concurrent goroutines: 6400 successes at 10% give 640
// retries, no more, no fewer.
func TestBudgetConcurrentExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := retry.NewBudget(0.1, 0, 10*time.Second)
		const g = 64
		var wg sync.WaitGroup
		for range g {
			wg.Go(func() {
				for range 100 {
					b.Deposit()
				}
			})
		}
		wg.Wait()
		var got atomic.Int64
		for range g {
			wg.Go(func() {
				for range 20 {
					if b.TryWithdraw() {
						got.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if got.Load() != 640 {
			t.Fatalf("%d retries allowed; want exactly 640", got.Load())
		}
		// Mixed: deposits and withdrawals racing; the total never exceeds what was deposited.
		b = retry.NewBudget(0.1, 0, 10*time.Second)
		got.Store(0)
		for range g {
			wg.Go(func() {
				for range 100 {
					b.Deposit()
					if b.TryWithdraw() {
						got.Add(1)
					}
				}
			})
		}
		wg.Wait()
		left := int64(b.Balance())
		if got.Load()+left != 640 {
			t.Fatalf("mixed: %d withdrawn + %d left; want 640", got.Load(), left)
		}
	})
}

func TestBudgetNilAndClamps(t *testing.T) {
	var b *retry.Budget
	b.Deposit()
	if !b.TryWithdraw() || !math.IsInf(b.Balance(), 1) {
		t.Fatal("nil budget must allow every retry")
	}
	for _, nb := range []*retry.Budget{
		retry.NewBudget(math.NaN(), math.NaN(), 0),
		retry.NewBudget(-1, -1, -time.Second),
		retry.NewBudget(math.Inf(1), math.Inf(1), math.MaxInt64),
	} {
		nb.Deposit()
		_ = nb.TryWithdraw()
		if bal := nb.Balance(); math.IsNaN(bal) || bal < 0 {
			t.Fatalf("balance %v", bal)
		}
	}
}
