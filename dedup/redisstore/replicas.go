package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// WithReplicaWait makes a first request's lease, and then its answer, wait until
// replicas replicas acknowledged it (Redis WAIT replicas timeout, sent to the
// key's master on the same connection, in the same round trip), so that a failover
// that promotes one of them keeps both. Redis replicates asynchronously: without
// this option a master that dies just after granting a lease may take it with it,
// and a repeat then runs the handler a second time, while or after the first ran.
//
// A lease that fewer replicas acknowledged within timeout is given back, and the
// request answered as by a store that cannot be reached (503 / Unavailable): the
// handler never runs on a lease a failover may lose. An answer that fewer replicas
// acknowledged stays stored on the master, and the error is reported; the response
// is already written.
//
// What it guarantees: with replicas equal to the replicas per master, a failover
// neither loses a lease whose handler ran nor an answer the store reported stored.
// What it does not: with more replicas per master than replicas, a failover may
// promote one that did not acknowledge (Redis promotes the most up to date it can
// reach); a master that restarts without persistence loses everything; WAIT is not
// a consensus: a partitioned master may still grant leases its replicas never see.
//
// The cost is one replication round trip (master to replica and back) added to a
// first request's lease and to its completion, and the same wait on a replay's
// lookup (its WAIT is sent with it and ignored). timeout must be shorter than the
// client's ReadTimeout; it is at least 1 ms. replicas of zero or less turns the
// option off. A Ring client has no replicas: New panics.
func WithReplicaWait(replicas int, timeout time.Duration) Option {
	return func(s *Store) {
		s.replicas, s.waitFor = max(replicas, 0), max(timeout, time.Millisecond)
	}
}

// ReplicaWaitError is what Acquire and Complete return when fewer replicas than
// [WithReplicaWait] asked acknowledged the write within its timeout.
type ReplicaWaitError struct {
	Acked, Want int
	Timeout     time.Duration
}

func (e *ReplicaWaitError) Error() string {
	return fmt.Sprintf("redisstore: %d of %d replicas acknowledged the write within %v", e.Acked, e.Want, e.Timeout)
}

// giveBack releases the lease with token, if it holds, as far as ctx allows: a
// lease it cannot release ends with its TTL, and repeats wait for it meanwhile.
func (s *Store) giveBack(ctx context.Context, keys []string, token string) {
	_ = release.Run(ctx, s.rdb, keys, leasePrefix(token)).Err()
}

// evalWait runs script on the master of keys[0] followed by WAIT, pipelined on one
// connection: WAIT counts the replicas that acknowledged the last write of its own
// connection, so it must follow the script on the connection that ran it, on the
// node that holds the key. A Cluster client sends a keyless WAIT to any master (or,
// with routing policies, to every one): the store asks it for the key's master.
func (s *Store) evalWait(ctx context.Context, script *redis.Script, keys []string, args []any) (any, int, error) {
	var node redis.Cmdable = s.rdb
	if s.cluster != nil {
		m, err := s.cluster.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, 0, err
		}
		node = m
	}
	timeout := s.waitFor
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	timeout = max(timeout, time.Millisecond) // WAIT 0 would wait for ever
	var ev *redis.Cmd
	var wait *redis.IntCmd
	pipe := func(load bool) error {
		_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			if load {
				ev = script.Eval(ctx, p, keys, args...)
			} else {
				ev = script.EvalSha(ctx, p, keys, args...)
			}
			wait = redis.NewIntCmd(ctx, "wait", s.replicas, timeout.Milliseconds())
			return p.Process(ctx, wait)
		})
		return err
	}
	err := pipe(false)
	if err != nil && redis.HasErrorPrefix(ev.Err(), "NOSCRIPT") {
		err = pipe(true)
	}
	if err != nil {
		return nil, 0, err
	}
	return ev.Val(), int(wait.Val()), nil
}
