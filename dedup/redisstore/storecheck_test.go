package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/dedup/redisstore"
	"github.com/deadlinekit/deadlinekit/internal/redistest"
	"github.com/deadlinekit/deadlinekit/internal/storecheck"
)

// TestStoreCheck runs the seeded checker of the dedup.Store contract
// (internal/storecheck) on a real redis-server, in real time with short leases:
// concurrent leases, completions and releases with right and wrong tokens, records
// that end while they are used.
func TestStoreCheck(t *testing.T) {
	srv := redistest.Start(t)
	rdb, _ := client(t, srv)
	n := 0
	storecheck.Run(t, func(*testing.T) dedup.Store {
		n++
		return redisstore.New(rdb, redisstore.WithPrefix(fmt.Sprint("sc", n, ":")))
	}, storecheck.WithUnit(20*time.Millisecond), storecheck.WithSlack(30*time.Millisecond))
}

// TestStoreCheckCluster runs it on a real Redis Cluster (3 masters, 1 replica each).
func TestStoreCheckCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	rdb := clusterClient(t, cl)
	n := 0
	storecheck.Run(t, func(*testing.T) dedup.Store {
		n++
		return redisstore.New(rdb, redisstore.WithPrefix(fmt.Sprint("scc", n, ":")))
	}, storecheck.WithUnit(20*time.Millisecond), storecheck.WithSlack(30*time.Millisecond))
}
