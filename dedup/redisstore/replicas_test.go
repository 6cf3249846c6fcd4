package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/dedup/redisstore"
	"github.com/deadlinekit/deadlinekit/internal/redistest"
)

// TestReplicaWaitWithoutReplicas: a Redis with no replica acknowledges no lease:
// the handler never runs, the request is answered 503, and the lease is given back
// (the key is Absent, not blocked until the lease ends).
func TestReplicaWaitWithoutReplicas(t *testing.T) {
	srv := redistest.Start(t)
	rdb, c := client(t, srv)
	s := redisstore.New(rdb, redisstore.WithReplicaWait(1, 10*time.Millisecond))
	r := newRuns()
	h := dedup.NewMiddleware(s)(r)
	if code, _ := do(h, "k", time.Second); code != http.StatusServiceUnavailable || r.count("k") != 0 {
		t.Fatalf("first request: %d, ran %d times; want 503 and no run", code, r.count("k"))
	}
	ctx := context.Background()
	if e, err := s.Get(ctx, "0::k"); err != nil || e.State != dedup.Absent {
		t.Fatalf("after the refusal: %+v %v, want the lease given back", e, err)
	}
	c.n.Store(0)
	_, _, err := s.Acquire(ctx, "0::k", dedup.Lease{Token: "a", Fingerprint: "f", TTL: time.Minute})
	var rw *redisstore.ReplicaWaitError
	if !errors.As(err, &rw) || rw.Acked != 0 || rw.Want != 1 {
		t.Fatalf("Acquire: %v, want a ReplicaWaitError", err)
	}
	// The lease and WAIT in one round trip, the release in a second.
	if got := c.n.Load(); got != 2 {
		t.Errorf("a refused lease: %d round trips, want 2", got)
	}
	// Off: the same store without the option runs the handler.
	h = dedup.NewMiddleware(redisstore.New(rdb, redisstore.WithReplicaWait(0, time.Second)))(r)
	if code, _ := do(h, "k", time.Second); code != http.StatusCreated || r.count("k") != 1 {
		t.Fatalf("WithReplicaWait(0, …): %d, ran %d times", code, r.count("k"))
	}
}

// BenchmarkClusterFirstRequest: a first request (lease, handler, completion) and a
// replay through the dedup middleware on a 3-master cluster with a replica each,
// without and with WithReplicaWait(1, 100ms). roundtrips/op counts what the node
// clients send (a pipeline is one).
//
//	go test -run '^$' -bench ClusterFirstRequest -benchtime 2000x ./dedup/redisstore/
func BenchmarkClusterFirstRequest(b *testing.B) {
	c := redistest.StartCluster(b, 3, 1)
	for _, bc := range []struct {
		name string
		opts []redisstore.Option
	}{
		{"async", nil},
		{"WithReplicaWait", []redisstore.Option{redisstore.WithReplicaWait(1, 100*time.Millisecond)}},
	} {
		cnt := &counter{}
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
		rdb.OnNewNode(func(n *redis.Client) { n.AddHook(cnt) })
		h := dedup.NewMiddleware(redisstore.New(rdb, bc.opts...))(newRuns())
		for i := range 100 { // warm: connections, slot map, scripts on every master
			do(h, fmt.Sprintf("warm-%s-%d", bc.name, i), time.Second)
		}
		runs := 0 // keys differ from one run of a sub-benchmark to the next
		for _, replay := range []bool{false, true} {
			name := bc.name + "/first"
			if replay {
				name = bc.name + "/replay"
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				runs++
				key := func(i int) string { return fmt.Sprintf("%s-%d-%d", bc.name, runs, i) }
				if replay { // every replay is of one key, completed before
					do(h, bc.name+"-replayed", time.Second)
					key = func(int) string { return bc.name + "-replayed" }
				}
				cnt.n.Store(0)
				i := 0
				for b.Loop() {
					if code, _ := do(h, key(i), time.Second); code != http.StatusCreated {
						b.Fatalf("status %d", code)
					}
					i++
				}
				b.ReportMetric(float64(cnt.n.Load())/float64(i), "roundtrips/op")
			})
		}
		rdb.Close()
	}
}

// TestReplicaWaitAbandonedLeaseDoesNotBlockItsKey is TestAbandonedLeaseDoesNotBlockItsKey
// with WithReplicaWait: an Acquire (script and WAIT) abandoned at the bound on a
// paused master, which the master runs once it resumes, holds a lease no request
// runs under. The next try of the same request, with a fresh token, takes the key
// instead of being told for the lease's whole TTL that its key runs.
func TestReplicaWaitAbandonedLeaseDoesNotBlockItsKey(t *testing.T) {
	master, replica := redistest.Start(t), redistest.Start(t)
	ctx := t.Context()
	admin := redis.NewClient(&redis.Options{Addr: replica.Addr})
	t.Cleanup(func() { admin.Close() })
	host, port, _ := strings.Cut(master.Addr, ":")
	if err := admin.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	rdb := userClient(master)
	s := redisstore.New(rdb, redisstore.WithTimeout(50*time.Millisecond), redisstore.WithReplicaWait(1, time.Second))
	for i := 0; ; i++ { // the replica attached: a lease is acknowledged
		ok, _, err := s.Acquire(ctx, fmt.Sprint("warm-", i), dedup.Lease{Token: "w", Fingerprint: "fp", TTL: time.Minute})
		if err == nil && ok {
			break
		}
		if i > 200 {
			t.Fatalf("the replica never acknowledged a lease: %v", err)
		}
		<-time.After(50 * time.Millisecond)
	}
	hold := &holdReply{mark: "abandoned-token", landed: make(chan struct{}), release: make(chan struct{})}
	rdb.AddHook(hold)
	released := false
	t.Cleanup(func() {
		if !released {
			close(hold.release)
		}
		rdb.Close()
		s.Close()
	})
	if err := master.Pause(); err != nil {
		t.Fatal(err)
	}
	first := dedup.Lease{Token: "abandoned-token", Fingerprint: "fp", TTL: time.Minute}
	if _, _, err := s.Acquire(ctx, "k", first); !isUnavailable(err) {
		master.Resume()
		t.Fatalf("paused: %v, want ErrUnavailable", err)
	}
	if err := master.Resume(); err != nil {
		t.Fatal(err)
	}
	<-hold.landed // the master ran the abandoned Acquire: its lease is held, not yet given back
	takesTheKeyFromAnAbandonedLease(t, s, rdb, hold, &released)
}
