package redisstore_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/dedup/redisstore"
	"github.com/deadlinekit/deadlinekit/internal/redistest"
)

// lossFigures is what one lease-loss run measured.
type lossFigures struct {
	before, window       int // first requests on the victim's keys, before and in the window
	windowRan            int // of the window's, those whose handler ran
	windowUnavailable    int // of the window's, those answered 503
	twice                int // keys whose handler ran twice
	beforeLeasesSurvived int // before-keys whose repeat found the lease (409)
}

// leaseLoss measures keys run twice across a failover. First requests take leases
// on keys of one master, and hold them (their handlers wait) throughout. Then the
// master's replica falls behind: it is paused (SIGSTOP) and its link killed (CLIENT
// KILL TYPE replica), so that what the master writes next reaches no replica. More
// first requests take leases in that window; the master is killed (SIGKILL), the
// replica resumed and promoted. Every key is then repeated: a key whose lease
// survived answers 409 (its first still runs); one whose acknowledged lease was
// lost is Absent on the new master, and its handler runs a second time.
func leaseLoss(t *testing.T, opts ...redisstore.Option) lossFigures {
	c := redistest.StartCluster(t, 3, 1)
	rdb := clusterClient(t, c)
	r := newRuns()
	r.hold, r.holding = make(chan struct{}), true
	// A repeat whose first still runs answers 409 at once (its budget is below the
	// floor): it does not wait for a first that is held.
	h := dedup.NewMiddleware(redisstore.New(rdb, append([]redisstore.Option{roomy}, opts...)...), dedup.WithFloor(time.Second))(r)
	victim, replica := c.Masters[0], c.Replicas[0][0]
	var f lossFigures
	var firsts sync.WaitGroup
	defer func() { close(r.hold); firsts.Wait() }()
	start := func(prefix string, n int) []int {
		codes := make([]int, n)
		var started sync.WaitGroup
		for i := range n {
			k := onMaster(c, 0, fmt.Sprintf("%s%d-", prefix, i))
			started.Add(1)
			firsts.Go(func() {
				r.onStart(k, started.Done)
				code, _ := do(h, k, 30*time.Second)
				codes[i] = code
				r.onStart(k, nil) // returned without running
			})
		}
		started.Wait() // each handler runs, or its request was answered
		return codes
	}
	before := start("before-", 100)
	c.WaitInSync(t)
	ctx := context.Background()
	if err := c.Pause(replica); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			c.Resume(replica)
		}
	}()
	if err := c.Admin(victim).ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	window := start("window-", 50)
	c.Kill(victim)
	resumed = c.Resume(replica) == nil
	c.WaitFailover(t)
	// The killed master comes back as the new master's replica: with
	// WithReplicaWait, a master without a replica grants no lease.
	c.Restart(t, victim)
	for _, code := range before {
		if code != 0 {
			t.Fatalf("a first request before the window was answered %d", code)
		}
	}
	f.before, f.window = len(before), len(window)
	for i, code := range window {
		k := onMaster(c, 0, fmt.Sprintf("window-%d-", i))
		switch {
		case code == http.StatusServiceUnavailable && r.count(k) == 0:
			f.windowUnavailable++
		case r.count(k) == 1:
			f.windowRan++
		}
	}
	r.mu.Lock()
	r.holding = false // a repeat that runs first (its first was answered 503) returns
	r.mu.Unlock()
	f.twice, f.beforeLeasesSurvived = repeatAll(t, h, r, c)
	return f
}

// repeatAll repeats every key of leaseLoss once the store reaches the new master,
// and counts the keys run twice and the before-keys whose lease survived.
func repeatAll(t *testing.T, h http.Handler, r *runs, c *redistest.Cluster) (twice, survived int) {
	t.Helper()
	for _, p := range []struct {
		prefix string
		n      int
	}{{"before-", 100}, {"window-", 50}} {
		for i := range p.n {
			k := onMaster(c, 0, fmt.Sprintf("%s%d-", p.prefix, i))
			code := http.StatusServiceUnavailable
			// The first calls after the failover may still go to the old master,
			// until the client's slot map is reloaded: 503, or 499 when the
			// client's retries outlast the budget.
			for try := 0; code == http.StatusServiceUnavailable || code == 499; try++ {
				if try == 500 {
					t.Fatalf("repeat of %s: 503 after %d tries", k, try)
				}
				if try > 0 {
					time.Sleep(10 * time.Millisecond)
				}
				code, _ = do(h, k, 500*time.Millisecond)
			}
			if r.count(k) > 1 {
				twice++
			}
			if code == http.StatusConflict && p.prefix == "before-" {
				survived++
			} else if p.prefix == "before-" {
				t.Logf("repeat of %s: %d", k, code)
			}
		}
	}
	return twice, survived
}

// TestLeaseLossAcrossFailover: without WithReplicaWait, every lease taken while the
// replica was behind is lost in the failover, and each of those keys runs twice;
// with it, none runs twice: the window's first requests are answered 503 instead.
func TestLeaseLossAcrossFailover(t *testing.T) {
	t.Run("async", func(t *testing.T) {
		f := leaseLoss(t)
		t.Logf("without WithReplicaWait: %+v", f)
		if f.windowRan == 0 || f.twice != f.windowRan || f.beforeLeasesSurvived != f.before {
			t.Errorf("want every lease of the window (%d) lost and run twice, every earlier one kept: %+v", f.windowRan, f)
		}
	})
	t.Run("WithReplicaWait", func(t *testing.T) {
		f := leaseLoss(t, redisstore.WithReplicaWait(1, 100*time.Millisecond))
		t.Logf("with WithReplicaWait(1, 100ms): %+v", f)
		if f.twice != 0 || f.windowUnavailable != f.window || f.beforeLeasesSurvived != f.before {
			t.Errorf("want no key run twice, every first request of the window answered 503, every earlier lease kept: %+v", f)
		}
	})
}
