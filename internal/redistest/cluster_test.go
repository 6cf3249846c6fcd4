package redistest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/deadlinekit/deadlinekit/internal/redistest"
)

func TestMain(m *testing.M) {
	// go-redis redials a node that refused a connection from a goroutine of its
	// pool, which sleeps a second between tries and ends once it sees the pool
	// closed: after a killed master, it outlives the client by up to that second.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"":                     0,
		"123456789":            12739, // CRC16/XMODEM's check value 0x31C3, mod 16384
		"foo":                  12182,
		"{user1000}.following": redistest.Slot("user1000"),
		"foo{}{bar}":           redistest.Slot("foo{}{bar}"),
	} {
		if got := redistest.Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// TestClusterFailover forms a 3-master cluster with a replica each, checks Slot
// against CLUSTER KEYSLOT, kills the master of a key and waits for its replica to
// take over: the key written before the kill is read back from the new master.
func TestClusterFailover(t *testing.T) {
	start := time.Now()
	c := redistest.StartCluster(t, 3, 1)
	t.Logf("cluster formed in %v", time.Since(start))
	ctx := context.Background()
	admin := c.Admin(c.Masters[0])
	for i := range 50 {
		key := fmt.Sprintf("dedup:{0::k%d}", i)
		want, err := admin.ClusterKeySlot(ctx, key).Result()
		if err != nil || int(want) != redistest.Slot(key) {
			t.Fatalf("Slot(%q) = %d, CLUSTER KEYSLOT %d (%v)", key, redistest.Slot(key), want, err)
		}
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second})
	defer rdb.Close()
	const key = "k"
	victim := c.Masters[c.MasterOf(redistest.Slot(key))]
	if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	c.WaitInSync(t)
	c.Kill(victim)
	start = time.Now()
	c.WaitFailover(t)
	t.Logf("failover in %v", time.Since(start))
	var got string
	var err error
	for range 100 { // the client learns the new master from a MOVED or a refused connection
		if got, err = rdb.Get(ctx, key).Result(); err == nil {
			break
		}
		// go-redis reloads its slot map after a MOVED, or once a minute: a dead
		// master refuses connections and answers no MOVED.
		rdb.ReloadState(ctx)
		time.Sleep(20 * time.Millisecond)
	}
	if got != "v" {
		t.Fatalf("after the failover: %q, %v", got, err)
	}
	nodes, _ := c.Admin(c.Replicas[c.MasterOf(redistest.Slot(key))][0]).ClusterNodes(ctx).Result()
	if !strings.Contains(nodes, "myself,master") {
		t.Fatalf("the replica was not promoted:\n%s", nodes)
	}
}

// TestServerKillPauseRestart: a paused server answers nothing until resumed, a
// killed one refuses connections, and a restart serves again on the same address.
func TestServerKillPauseRestart(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	ping := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(t.Context(), d)
		defer cancel()
		return rdb.Ping(ctx).Err()
	}
	if err := ping(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := ping(100 * time.Millisecond); err == nil {
		t.Fatal("a paused server answered")
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := ping(10 * time.Second); err != nil {
		t.Fatalf("resumed: %v", err)
	}
	addr := srv.Addr
	srv.Kill()
	if err := ping(10 * time.Second); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("killed: %v, want connection refused", err)
	}
	srv.Kill() // twice: nothing
	srv.Restart(t)
	if srv.Addr != addr {
		t.Fatalf("restarted on %s, was %s", srv.Addr, addr)
	}
	if err := ping(10 * time.Second); err != nil {
		t.Fatalf("restarted: %v", err)
	}
}
