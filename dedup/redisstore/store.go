package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deadlinekit/deadlinekit/dedup"
)

// DefaultPrefix starts the name of every Redis key the store writes.
const DefaultPrefix = "dedup:"

// Option configures a [Store].
type Option func(*Store)

// WithPrefix sets the start of every Redis key the store writes, so that several
// services (or several stores) share one Redis. Default [DefaultPrefix].
//
// Give each service its own: on one prefix, a key a client sends to two services
// (or that one forwards to another) is one record, and the second service's request
// is refused as another's (422 / FailedPrecondition) or, when its method, path and
// body are the first's, answered with the first service's answer.
func WithPrefix(p string) Option { return func(s *Store) { s.prefix = p } }

// Store is a [dedup.Store] on Redis. It is safe for concurrent use.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	// cluster is rdb when it is a Cluster client, whose slot map the store asks to
	// reload after a failure.
	cluster *redis.ClusterClient
	// replicas and waitFor: WithReplicaWait's (0: no waiting).
	replicas int
	waitFor  time.Duration
	calls
}

var _ dedup.Store = (*Store)(nil)

// New returns a Store on rdb. It panics if rdb is nil.
func New(rdb redis.UniversalClient, opts ...Option) *Store {
	if rdb == nil {
		panic("redisstore: New with a nil client")
	}
	s := &Store{rdb: rdb, prefix: DefaultPrefix, calls: calls{timeout: DefaultTimeout}}
	s.cluster, _ = rdb.(*redis.ClusterClient)
	if c, ok := rdb.(*redis.Client); ok {
		s.single.reach = reachOf(c)
		c.AddHook(watch{h: &s.single})
	}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	if _, ring := rdb.(*redis.Ring); ring && s.replicas > 0 {
		panic("redisstore: WithReplicaWait on a Ring, which has no replicas to wait for")
	}
	return s
}

// A record is "R" token "\n" fingerprint while running, "D" fingerprint "\n" answer
// when done.
func (s *Store) name(key string) string { return s.prefix + "{" + key + "}" }

func running(token, fp string) string { return "R" + token + "\n" + fp }

// acquire takes the lease, or returns the record and its time left.
var acquire = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}
`)

// complete replaces the lease whose record starts with ARGV[1] by the answer
// ARGV[2], under the lease's fingerprint. A record already done with this very
// answer is a success: a completion the store gave up on at its bound, that Redis
// ran after all, is then tried again.
var complete = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], 'D' .. string.sub(v, #ARGV[1] + 1) .. '\n' .. ARGV[2], 'PX', ARGV[3])
  return 1
end
if v and #ARGV[2] > 0 and string.sub(v, 1, 1) == 'D' and #v > #ARGV[2] and string.sub(v, -#ARGV[2] - 1) == '\n' .. ARGV[2] then
  return 1
end
return 0
`)

// release deletes the lease whose record starts with ARGV[1].
var release = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`)

var get = redis.NewScript(`return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}`)

func ms(d time.Duration) string {
	return strconv.FormatInt(max(int64((d+time.Millisecond-1)/time.Millisecond), 1), 10)
}

// Acquire implements [dedup.Store]: one round trip. With [WithReplicaWait], a lease
// that too few replicas acknowledged in time is given back, and Acquire returns a
// [*ReplicaWaitError]: the handler does not run on a lease a failover may lose.
//
// A key held by the lease of an Acquire this store abandoned at its bound (its
// request got a 503 and runs no handler under it; the abandoned call gives it back
// when it returns) is given back at once and taken: two round trips more. Else a
// request's next try, once the store is back, would be told that its key runs, for
// the lease's whole time, by the lease of its own try before.
func (s *Store) Acquire(ctx context.Context, key string, l dedup.Lease) (bool, dedup.Entry, error) {
	keys := []string{s.name(key)}
	for try := 0; ; try++ {
		v, err := s.acquireOnce(ctx, keys, l)
		if err != nil {
			return false, dedup.Entry{}, err
		}
		if n, ok := v.(int64); ok && n == 1 {
			return true, dedup.Entry{}, nil
		}
		if token, ok := runningToken(v); ok && try == 0 && s.isStale(keys[0], token) {
			if err := s.do(ctx, keys[0], func(ctx context.Context) error {
				return release.Run(ctx, s.rdb, keys, leasePrefix(token)).Err()
			}, callOpts{}); err != nil {
				return false, dedup.Entry{}, err
			}
			continue
		}
		e, err := parse(v)
		return false, e, err
	}
}

// acquireOnce runs the acquire script once, bounded: with [WithReplicaWait],
// followed by WAIT, and a lease too few replicas acknowledged given back and
// reported as a [*ReplicaWaitError]. v is the script's reply.
func (s *Store) acquireOnce(ctx context.Context, keys []string, l dedup.Lease) (any, error) {
	// v and acked are written by the call, which may go on after it was abandoned:
	// they are read only when it returned in time, and never written here.
	var v any
	var acked int
	opts := callOpts{undo: func(ctx context.Context) { s.giveBack(ctx, keys, l.Token) }, stale: keys[0] + "\n" + l.Token}
	call := func(ctx context.Context) (err error) {
		v, err = acquire.Run(ctx, s.rdb, keys, running(l.Token, l.Fingerprint), ms(l.TTL)).Result()
		return err
	}
	if s.replicas > 0 {
		call = func(ctx context.Context) (err error) {
			v, acked, err = s.evalWait(ctx, acquire, keys, []any{running(l.Token, l.Fingerprint), ms(l.TTL)})
			if err != nil {
				s.giveBack(ctx, keys, l.Token) // the lease may have been taken before the failure
			} else if n, ok := v.(int64); ok && n == 1 && acked < s.replicas {
				s.giveBack(ctx, keys, l.Token)
			}
			return err
		}
	}
	if err := s.do(ctx, keys[0], call, opts); err != nil {
		return nil, err
	}
	if n, ok := v.(int64); ok && n == 1 && acked < s.replicas {
		return nil, &ReplicaWaitError{Acked: acked, Want: s.replicas, Timeout: s.waitFor}
	}
	return v, nil
}

// isStale reports whether token's lease on name is that of an Acquire this store
// abandoned at its bound, not yet given back.
func (s *Store) isStale(name, token string) bool {
	_, ok := s.stale.Load(name + "\n" + token)
	return ok
}

// runningToken is the token of the lease in v, an Acquire's {record, pttl}, when
// the record is a lease.
func runningToken(v any) (string, bool) {
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return "", false
	}
	val, _ := a[0].(string)
	i := strings.IndexByte(val, '\n')
	if i < 1 || val[0] != 'R' {
		return "", false
	}
	return val[1:i], true
}

// Complete implements [dedup.Store]: one round trip. With [WithReplicaWait], an
// answer that too few replicas acknowledged in time is still stored on the master,
// and Complete returns a [*ReplicaWaitError]: a failover may lose it.
func (s *Store) Complete(ctx context.Context, key, token string, answer []byte, retain time.Duration) error {
	keys, args := []string{s.name(key)}, []any{leasePrefix(token), answer, ms(retain)}
	var v any
	var err error
	acked := s.replicas
	err = s.do(ctx, keys[0], func(ctx context.Context) (err error) {
		if s.replicas > 0 {
			v, acked, err = s.evalWait(ctx, complete, keys, args)
		} else {
			v, err = complete.Run(ctx, s.rdb, keys, args...).Result()
		}
		return err
	}, callOpts{finish: true})
	if err != nil {
		return err
	}
	if n, _ := v.(int64); n != 1 {
		return dedup.ErrLeaseLost
	}
	if acked < s.replicas {
		return &ReplicaWaitError{Acked: acked, Want: s.replicas, Timeout: s.waitFor}
	}
	return nil
}

// leasePrefix is what the record of the lease with token starts with.
func leasePrefix(token string) string { return "R" + token + "\n" }

// Release implements [dedup.Store]: one round trip.
func (s *Store) Release(ctx context.Context, key, token string) error {
	var n int
	err := s.do(ctx, s.name(key), func(ctx context.Context) (err error) {
		n, err = release.Run(ctx, s.rdb, []string{s.name(key)}, leasePrefix(token)).Int()
		return err
	}, callOpts{finish: true})
	if err != nil {
		return err
	}
	if n != 1 {
		return dedup.ErrLeaseLost
	}
	return nil
}

// Get implements [dedup.Store]: one round trip.
func (s *Store) Get(ctx context.Context, key string) (dedup.Entry, error) {
	var v any
	err := s.do(ctx, s.name(key), func(ctx context.Context) (err error) {
		v, err = get.Run(ctx, s.rdb, []string{s.name(key)}).Result()
		return err
	}, callOpts{})
	if err != nil {
		return dedup.Entry{}, err
	}
	return parse(v)
}

// Wait implements [dedup.Store] by polling ([dedup.PollWait]).
func (s *Store) Wait(ctx context.Context, key string) (dedup.Entry, error) {
	return dedup.PollWait(ctx, s, key)
}

// failed returns err, a call's failure, after asking a Cluster client to reload
// its slot map: go-redis reloads it on its own only after a MOVED answer or once a
// minute, and a master that died answers nothing, so without this a failover goes
// unseen, and every key of the dead master's slots fails, for up to a minute.
// Reloads are asynchronous and go-redis runs at most one at a time.
func (s *Store) failed(ctx context.Context, err error) error {
	if err != nil && s.cluster != nil && !errors.Is(err, context.Canceled) {
		s.cluster.ReloadState(ctx)
	}
	return err
}

var errBadRecord = errors.New("redisstore: a record in Redis is not one this store wrote")

// parse reads {value, pttl}.
func parse(v any) (dedup.Entry, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return dedup.Entry{}, errBadRecord
	}
	pttl, _ := a[1].(int64)
	val, ok := a[0].(string)
	if !ok || pttl == -2 { // nil: gone
		return dedup.Entry{}, nil
	}
	left := time.Duration(pttl) * time.Millisecond
	i := strings.IndexByte(val, '\n')
	if i < 1 {
		return dedup.Entry{}, errBadRecord
	}
	switch val[0] {
	case 'R':
		return dedup.Entry{State: dedup.Running, Fingerprint: val[i+1:], Left: left}, nil
	case 'D':
		return dedup.Entry{State: dedup.Done, Fingerprint: val[1:i], Left: left, Answer: []byte(val[i+1:])}, nil
	}
	return dedup.Entry{}, errBadRecord
}
