// Package redisstore is a [dedup.Store] on Redis, so that every replica of a service
// sees every idempotency key: New(client) on the user's own redis.UniversalClient
// (github.com/redis/go-redis/v9: a single node, Sentinel or Cluster).
//
//	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"redis:6379"}})
//	h = dedup.NewMiddleware(redisstore.New(rdb, redisstore.WithPrefix("payments:")))(h)
//
// Every replica of a service uses the same prefix; every service its own
// ([WithPrefix]), when several share one Redis.
//
// Each key is one Redis string under prefix + "{" + key + "}" (the hash tag keeps a
// key's record in one Cluster slot). A lease is SET NX PX in a script that returns
// the current record when the key is taken, so that a first request costs two round
// trips (the lease, the completion) and a replay one. Completion and release are
// scripts that compare the lease's token, so that a slow first request whose lease
// ended never overwrites the request that took the key after it. A waiting repeat
// polls with a pause growing from 1 ms to 50 ms, within its budget and never past the
// first's lease ([dedup.PollWait]).
//
// Every call to Redis is bounded by [WithTimeout] ([DefaultTimeout], 250 ms) and by
// the context the middleware gives it (the request's deadline; completion and
// release: the lease's end), whatever the client's options: go-redis's retries, its
// dial and read timeouts, and a read that ignores the context's deadline without
// ContextTimeoutEnabled. A call that fails, or reaches the bound, marks its Redis (on
// a Cluster, the key's master) down: every lease and lookup on it then fails at
// once (completions and releases are still tried) with a
// [dedup.UnavailableError] saying when the next try goes, for [FirstPause] (100 ms),
// doubling to [MaxPause] (500 ms) while the probes fail; one call at a time probes, and
// its success lets traffic back. So a Redis that is killed or stalls costs a request
// at most the bound, and the rest a prompt 503 + Retry-After until it is back.
//
// On a Cluster, a call that fails makes the store ask the client to reload its slot
// map (ClusterClient.ReloadState): go-redis reloads it on its own only after a MOVED
// answer or once a minute, and a killed master answers nothing, so a failover would
// otherwise go unseen, and every key of the dead master's slots answer 503, for up
// to a minute.
//
// Redis replicates asynchronously: a master that dies just after granting a lease
// may take it with it, and a repeat then finds the key Absent on the promoted
// replica and runs the handler again. [WithReplicaWait] closes that gap for the
// price of a replication round trip on each write (RELIABILITY.md has the figures).
package redisstore
