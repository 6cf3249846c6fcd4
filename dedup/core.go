package dedup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/deadlinekit/deadlinekit/internal/record"
)

// Outcomes, as written in deadlinekit.dedup.outcome.
const (
	outFirst       = "first"
	outReplayed    = "replayed"
	outWaited      = "waited"
	outConflict    = "conflict"
	outMismatch    = "mismatch"
	outReleased    = "released"
	outUnavailable = "store_unavailable"
	outMalformed   = "malformed"
	outNotKept     = "not_kept"
	outCanceled    = "canceled"
)

// verdict is what begin decided for a keyed request.
type verdict uint8

const (
	vRun         verdict = iota + 1 // the lease is ours: run the handler
	vReplay                         // a stored answer: t.answer
	vConflict                       // the first still runs past our budget: come back after t.comeBack
	vMismatch                       // the key belongs to another request
	vUnavailable                    // the store failed: t.err
	vCanceled                       // our caller left while we waited
)

// core is the protocol-free half shared by the adapters.
type core struct {
	store Store
	c     config
}

// ticket carries one keyed request's state between begin and finish, on the
// adapter's stack: nothing keeps it past the request (what a running handler may
// reach is its [runContext]), so it costs no allocation.
type ticket struct {
	key      string // in its scope ([core.storeKey]), set with fp ([core.setFingerprint])
	inbound  string // as the caller sent it, parsed
	token    string
	fp       string
	sum      [sha256.Size]byte // the bytes fp's hex digits spell
	leaseEnd time.Time
	answer   []byte
	comeBack time.Duration
	waited   time.Duration
	err      error

	// holderLeft is what the first's lease had left when a conflict was decided.
	holderLeft time.Duration
}

// storeKey is key in scope: the scope's length first, so that no scope's keys can
// be written as another's.
func (c *core) storeKey(ctx context.Context, key string) string {
	s := c.scope(ctx)
	return strconv.Itoa(len(s)) + ":" + s + ":" + key
}

// scope is the scope of the request of ctx: "" without [WithScope].
func (c *core) scope(ctx context.Context) string {
	if c.c.scope == nil {
		return ""
	}
	return c.c.scope(ctx)
}

// newToken returns a token no other lease holds: 128 random bits.
func newToken() string {
	var b [tokenLen]byte
	putToken(&b)
	return string(b[:])
}

// tokenLen is the length of a token: 128 bits in hex.
const tokenLen = 32

// putToken writes a new token into b.
func putToken(b *[tokenLen]byte) {
	var r [16]byte
	u, v := rand.Uint64(), rand.Uint64()
	for i := range 8 {
		r[i], r[8+i] = byte(u>>(8*i)), byte(v>>(8*i))
	}
	hex.Encode(b[:], r[:])
}

// leaseTTL is the lease of a request with ctx at now: its time left plus the
// margin, or the default budget plus the margin without a deadline; never less
// than the margin (a request whose deadline passed still gets a lease that ends: a
// record without an expiry would block its key for good).
func (c *core) leaseTTL(ctx context.Context, now time.Time) time.Duration {
	d, ok := ctx.Deadline()
	left := c.c.defaultBudget
	if ok {
		left = max(d.Sub(now), 0)
	}
	return max(left+c.c.margin, c.c.margin, time.Millisecond)
}

// begin takes the lease for (key, fp), or finds what the request gets instead.
func (c *core) begin(ctx context.Context, t *ticket) verdict {
	if t.token == "" { // setFingerprint gives one with the fingerprint
		t.token = newToken()
	}
	var waitStart, storeWaitStart time.Time
	for tries := 0; tries < 8; tries++ {
		start := time.Now()
		ttl := c.leaseTTL(ctx, start)
		got, e, err := c.acquire(ctx, t, ttl, start)
		if record.DedupStoreEnabled(ctx) {
			record.DedupStore(ctx, "acquire", time.Since(start))
		}
		if err != nil {
			if c.waitForStore(ctx, err, &storeWaitStart) {
				// A fresh token: the failed call may still reach the store, take
				// the lease under the old one and give it back when it returns,
				// which must not release the lease this request goes on to hold.
				t.token = newToken()
				tries-- // a wait for the store is no change of hands
				continue
			}
			return c.failed(ctx, t, err)
		}
		if got {
			t.leaseEnd = start.Add(ttl)
			return vRun
		}
		if v, ok := found(t, e); ok {
			return v
		}
		if e.State == Absent {
			continue // ended between two looks: take it
		}
		if v, ok := c.awaitFirst(ctx, t, start, e.Left, &waitStart); ok {
			return v
		}
	}
	return c.failed(ctx, t, errors.New("dedup: the key changed hands too often"))
}

// acquire asks the store for t's lease of ttl, computed at now: the memory store
// takes that reading as its own (one clock read fewer on every keyed request).
func (c *core) acquire(ctx context.Context, t *ticket, ttl time.Duration, now time.Time) (bool, Entry, error) {
	l := Lease{Token: t.token, Fingerprint: t.fp, TTL: ttl}
	if ms, ok := c.store.(*MemoryStore); ok {
		return ms.acquireAt(t.key, l, now, t.sum[:])
	}
	return c.store.Acquire(ctx, t.key, l)
}

// wait waits in ctx for the record of t's key to stop running.
func (c *core) wait(ctx context.Context, t *ticket) (Entry, error) {
	if ms, ok := c.store.(*MemoryStore); ok {
		return ms.wait(ctx, t.key, t.fp)
	}
	return c.store.Wait(ctx, t.key)
}

// waitForStore waits until the store, which failed with err, says it tries its
// backend again, when that fits in the request's budget (less its refusal's
// reserve) and in [WithStoreWait] counted from *since (set on the first wait). It
// reports whether the request waited and should try the store again.
func (c *core) waitForStore(ctx context.Context, err error, since *time.Time) bool {
	ue, ok := errors.AsType[*UnavailableError](err)
	if !ok || ue.RetryIn <= 0 || c.c.storeWait <= 0 || callerLeft(ctx) {
		return false
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return false
	}
	now := time.Now()
	if since.IsZero() {
		*since = now
	}
	wait := ue.RetryIn
	if now.Add(wait).After(since.Add(c.c.storeWait)) || dl.Sub(now)-wait < max(c.c.floor, MinRefusalReserve) {
		return false
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// found is the verdict for a record another request holds or held, when it
// decides one: the key was another request's, or its answer is stored.
func found(t *ticket, e Entry) (verdict, bool) {
	switch {
	case e.State != Absent && e.Fingerprint != t.fp:
		return vMismatch, true
	case e.State == Done:
		t.answer = e.Answer
		return vReplay, true
	}
	return 0, false
}

// awaitFirst waits for the first request, which holds the key's lease (left of it
// as seen at start), within our budget less the floor (at least
// MinRefusalReserve, the refusal's way back to our caller), holding no slot of the
// guard's meanwhile. It returns the verdict, or false when the first was released
// (or its lease ended) in time for us to try to take the key over.
func (c *core) awaitFirst(ctx context.Context, t *ticket, start time.Time, left time.Duration, waitStart *time.Time) (verdict, bool) {
	leaseEnd := start.Add(left) // the first's lease, as last seen
	until, ok := ctx.Deadline()
	if !ok {
		until = start.Add(c.c.defaultBudget)
	}
	until = until.Add(-max(c.c.floor, MinRefusalReserve))
	if !time.Now().Before(until) {
		return c.conflict(t, leaseEnd), true
	}
	if waitStart.IsZero() {
		*waitStart = time.Now()
	}
	wctx, cancel := context.WithDeadline(ctx, until)
	idle(ctx)
	from := time.Now()
	e, err := c.wait(wctx, t)
	cancel()
	record.DedupWaited(ctx, time.Since(from))
	t.waited = time.Since(*waitStart)
	switch {
	case err != nil && callerLeft(ctx):
		t.err = ctx.Err()
		return vCanceled, true
	case err != nil && (wctx.Err() != nil || !time.Now().Before(until)):
		// Our budget for waiting ended; the first's lease ends as last seen (asking
		// the store again could take the rest of our budget).
		return c.conflict(t, leaseEnd), true
	case err != nil:
		return c.failed(ctx, t, err), true
	}
	if v, ok := found(t, e); ok {
		return v, true
	}
	// Released or expired: take the lease over, if our budget allows.
	if !time.Now().Before(until) {
		return c.conflict(t, time.Now()), true
	}
	return 0, false
}

// conflict refuses a repeat whose budget ends before the first request, whose lease
// ends at leaseEnd: come back when the first's deadline has passed (the lease's end
// less the margin, which is there for a late answer to be stored, not for a repeat
// to wait out; at least 1 ms). A first on another replica is taken to have the same
// margin.
func (c *core) conflict(t *ticket, leaseEnd time.Time) verdict {
	t.holderLeft = max(time.Until(leaseEnd), 0)
	t.comeBack = max(t.holderLeft-c.c.margin, time.Millisecond)
	return vConflict
}

// failed reads a store call that returned err. Only a caller that left (ctx
// canceled) is vCanceled: a store that did not answer before the request's deadline
// is a store that cannot be reached, like one that refused (a stalled Redis whose
// client times out with the context is the common case), and its caller is told to
// come back, not that it left.
func (c *core) failed(ctx context.Context, t *ticket, err error) verdict {
	if callerLeft(ctx) {
		t.err = ctx.Err()
		return vCanceled
	}
	t.err = err
	return vUnavailable
}

// callerLeft reports whether ctx ended because the caller went away (canceled), not
// because the request's deadline passed.
func callerLeft(ctx context.Context) bool {
	return errors.Is(ctx.Err(), context.Canceled)
}

// finishCtx bounds a completion or a release by the lease's end: the request's
// deadline may have passed (an answer completed after it is still stored), but the
// lease still holds until then.
func (c *core) finishCtx(ctx context.Context, t *ticket) (context.Context, context.CancelFunc) {
	if _, inMemory := c.store.(*MemoryStore); inMemory {
		return ctx, func() {} // it never blocks, and reads no context: spare the timer
	}
	end := t.leaseEnd
	if until := time.Now().Add(c.c.margin); end.Before(until) {
		end = until
	}
	return context.WithDeadline(context.WithoutCancel(ctx), end)
}

// storeTimer reports whether a store call in ctx is timed for
// deadlinekit.dedup.store.duration, and when it started if so: without a meter
// provider that measures it, the clock is not read.
func storeTimer(ctx context.Context) (bool, time.Time) {
	if !record.DedupStoreEnabled(ctx) {
		return false, time.Time{}
	}
	return true, time.Now()
}

// complete stores answer for the lease in t, or notKept's when the store refuses
// answer for its size.
func (c *core) complete(ctx context.Context, t *ticket, answer []byte, notKept func() []byte) {
	fctx, cancel := c.finishCtx(ctx, t)
	timed, start := storeTimer(ctx)
	err := c.store.Complete(fctx, t.key, t.token, answer, c.c.retention)
	if errors.Is(err, ErrAnswerTooLarge) && notKept != nil {
		answer = notKept()
		err = c.store.Complete(fctx, t.key, t.token, answer, c.c.retention)
	}
	if timed {
		record.DedupStore(ctx, "complete", time.Since(start))
	}
	if err == nil { // the common case, without the closure settle would need
		cancel()
		return
	}
	key, token := t.key, t.token // the closure keeps no ticket
	c.settle(fctx, cancel, t, err, func() error { return c.store.Complete(fctx, key, token, answer, c.c.retention) })
}

// release gives the key up.
func (c *core) release(ctx context.Context, t *ticket) {
	fctx, cancel := c.finishCtx(ctx, t)
	timed, start := storeTimer(ctx)
	err := c.store.Release(fctx, t.key, t.token)
	if timed {
		record.DedupStore(ctx, "release", time.Since(start))
	}
	key, token := t.key, t.token // the closure keeps no ticket
	c.settle(fctx, cancel, t, err, func() error { return c.store.Release(fctx, key, token) })
}

// settle ends a completion or a release that returned err. One that failed for
// the store (not for the lease) is tried again in the background until it succeeds
// or the lease ends ([persist]): a store that blinked (a restart, a failover) must not
// leave a completed request's key leased with its answer lost, nor a released key
// blocked, and the caller's answer must not wait for it.
func (c *core) settle(fctx context.Context, cancel context.CancelFunc, t *ticket, err error, again func() error) {
	if err != nil {
		t.err = err
	}
	if err == nil || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrAnswerTooLarge) || fctx.Err() != nil {
		cancel()
		return
	}
	go func() {
		defer cancel()
		_ = persist(fctx, again)
	}()
}

// persist calls f, after a pause that starts at 5 ms and doubles up to 200 ms, until
// it succeeds, or fails with ErrLeaseLost or ErrAnswerTooLarge, or ctx (the lease)
// ends.
func persist(ctx context.Context, f func() error) error {
	pause := 5 * time.Millisecond
	t := time.NewTimer(pause)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		err := f()
		if err == nil || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrAnswerTooLarge) {
			return err
		}
		pause = min(2*pause, 200*time.Millisecond)
		t.Reset(pause)
	}
}

// report writes t's outcome on the span and the metrics.
func (c *core) report(ctx context.Context, outcome string, t *ticket) {
	c.notWork(ctx, outcome)
	var waited time.Duration
	var err error
	if t != nil {
		waited, err = t.waited, t.err
		if outcome == outConflict {
			record.DedupHolderLeft(ctx, t.holderLeft)
		}
	}
	record.Dedup(ctx, outcome, waited, err)
}

// runKey is the context key of the running request's [runContext], for Forget.
type runKey struct{}

// deduplicated reports whether an outer dedup layer already runs the request of ctx
// under its key (deadlinekit.NewHandler with WithDedup in front of a gRPC or connect
// handler that has WithDedup too): the inner layer steps aside. Two layers on one
// key would fingerprint one request two ways and refuse it as another's.
func deduplicated(ctx context.Context) bool {
	_, ok := ctx.Value(runKey{}).(*runContext)
	return ok
}

// Forget tells the deduplication of the request whose context is ctx that nothing
// happened: when the handler returns, its key is released instead of its answer
// being stored, so that a repeat runs the handler again. Call it when the handler
// answers an error that did no side effect and that a repeat may not meet (a
// dependency was down before anything was written). Without a keyed request under
// dedup in ctx it does nothing.
func Forget(ctx context.Context) {
	if rc, ok := ctx.Value(runKey{}).(*runContext); ok {
		rc.forgot.Store(true)
	}
}

// pushbackMs is d as grpc-retry-pushback-ms, at least 1 ms (a positive pushback
// means "come back"; zero could read as "at once").
func pushbackMs(d time.Duration) string {
	return strconv.FormatInt(max(int64((d+time.Millisecond-1)/time.Millisecond), 1), 10)
}

// retryAfter is d as Retry-After delta-seconds, rounded up, at least 1.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(max(int64((d+time.Second-1)/time.Second), 1), 10)
}
