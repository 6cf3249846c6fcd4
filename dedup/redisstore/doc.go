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
// The store also keeps go-redis's pool from giving up on a Redis that is down. With
// go-redis's defaults, once as many dials have failed as the pool has connections
// (PoolSize, 10 per CPU), the pool fails every call at once, without dialing, until
// a redial it tries once a second succeeds: a store that went on dialing a killed
// Redis would trip it within half a second, and be refused for up to a second more
// after Redis is back. So, on a *redis.Client (a single node, or Sentinel's failover
// client), New adds a hook to the client (AddHook) that only watches its dials: the
// first that fails marks the Redis down at once, before the calls that follow reach
// the pool. While down, a probe (and a completion or release) first opens a
// connection of its own with the client's dialer, outside the pool, and closes it:
// refused, the call goes no further, and the next probe goes FirstPause later, not
// MaxPause (a refused connection costs a dead Redis nothing), so that a Redis back
// is seen within FirstPause; accepted, the call goes to the client. Only the calls
// in flight as Redis goes down still dial through the pool (one failed dial each; a
// completion, up to four, with go-redis's retries); PoolSize of them at once, or
// the client's other users, still trip it: the store then probes every FirstPause
// and serves as soon as the client does. The client's options are kept as they are;
// the hook stays on the client after [Store.Close], and then marks only the closed
// store.
// On a Cluster, probes open their connection to the key's master, but no hook
// watches the dials (go-redis makes each node's client itself): a master's first
// failure is seen at the bound. On a Ring, the store's calls go to the client as
// before.
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
