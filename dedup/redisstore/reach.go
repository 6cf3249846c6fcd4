package redisstore

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// go-redis's pool, with its defaults, counts the dials that failed (each after
// five attempts 100 ms apart); once as many have failed as the pool has
// connections (PoolSize, 10 per CPU), it fails every call at once with the last
// dial error, without dialing, until a redial it tries once a second succeeds. A
// store whose calls dialed a dead Redis would trip it within half a second of an
// outage, and keep it tripped for up to a second after Redis is back. So the store
// keeps its calls off the pool while the Redis is down: it learns of the first
// refused dial at once (watch), and its probes and finishing calls first open a
// connection of their own (reach), which tells a Redis that is not running from one
// that is, without the pool.

// errRefused wraps a failed dial of reach: the Redis is not running.
type errRefused struct{ err error }

func (e *errRefused) Error() string {
	return "redisstore: Redis refused a connection: " + e.err.Error()
}
func (e *errRefused) Unwrap() error { return e.err }

// reachOf returns the reach check of the Redis c talks to: a connection opened with
// c's own dialer (its address, TLS, Sentinel's lookup of the master), closed at
// once.
func reachOf(c *redis.Client) func(context.Context) error {
	opt := c.Options()
	if opt == nil || opt.Dialer == nil {
		return nil
	}
	dial, network, addr := opt.Dialer, opt.Network, opt.Addr
	return func(ctx context.Context) error {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			if ctx.Err() != nil {
				return err // the bound: a Redis that does not answer, not one refused
			}
			return &errRefused{err: err}
		}
		return conn.Close()
	}
}

// reaching is f, a call admitted while h is down, once h.reach says Redis runs. A
// call that then fails on a dial error never reached Redis either: the client's
// pool had given up (its calls, or the store's in flight as Redis went down, failed
// as many dials as it has connections) and fails every call until its redial, once
// a second, succeeds. Both are refusals: probes that cost Redis nothing, that go on
// every FirstPause.
func (h *health) reaching(f func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := h.reach(ctx); err != nil {
			return err
		}
		err := f(ctx)
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return &errRefused{err: err}
		}
		return err
	}
}

// watch is a go-redis hook that tells h of a dial the client's pool failed: h is
// then down at once, instead of when the call that dialed reaches its bound, so
// that the calls that follow do not go to the pool (each would fail one more dial
// of it). It changes nothing of what the client does.
type watch struct{ h *health }

func (w watch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil && ctx.Err() == nil {
			w.h.done(false, refused, time.Now())
		}
		return conn, err
	}
}

func (watch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (watch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
