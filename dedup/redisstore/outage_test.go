package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/dedup/redisstore"
	"github.com/deadlinekit/deadlinekit/internal/redistest"
)

// userClient is a client as the go-redis docs build it: its defaults (three
// retries with a backoff, a 5 s dial and a 3 s read timeout, the context's deadline
// not applied to the socket).
func userClient(srv *redistest.Server) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: srv.Addr})
}

// outage is a service deduping on one Redis through a user's client.
type outage struct {
	srv   *redistest.Server
	rdb   *redis.Client
	store *redisstore.Store
	web   *httptest.Server
	ran   atomic.Int64
}

func newOutage(t *testing.T) *outage {
	o := &outage{srv: redistest.Start(t)}
	o.rdb = userClient(o.srv)
	o.store = redisstore.New(o.rdb)
	// WithStoreWait(0): these tests are of the store's bounds, the prompt 503 a
	// request gets when it does not wait for the store (TestRedisPausedWithinTheWait
	// is the default's wait).
	o.web = httptest.NewServer(withTimeout(dedup.NewMiddleware(o.store, dedup.WithStoreWait(0))(charge(&o.ran, nil))))
	t.Cleanup(func() {
		o.web.Close()
		o.rdb.Close()
		o.store.Close() // its abandoned calls end: goleak checks
	})
	return o
}

// timed posts a keyed request with a 10 s budget, and says how long it took.
func (o *outage) timed(t *testing.T, key string) (answer, time.Duration) {
	start := time.Now()
	a := post(t, o.web.URL, key, "10s")
	return a, time.Since(start)
}

// wantStoreDown checks a 503 that says when to come back (at most MaxPause) and
// that the failure is not the server's own.
func wantStoreDown(t *testing.T, what string, a answer) {
	t.Helper()
	ms, err := strconv.Atoi(a.header.Get("Grpc-Retry-Pushback-Ms"))
	if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") != "1" || a.header.Get("Deadlinekit-Relayed") != "1" ||
		err != nil || ms < 1 || ms > int(redisstore.MaxPause/time.Millisecond) {
		t.Fatalf("%s: %+v, want 503, Retry-After 1, a pushback within %v, relayed", what, a, redisstore.MaxPause)
	}
}

// servedAgain posts fresh keys until one is served, and returns how many were
// refused first.
func (o *outage) servedAgain(t *testing.T) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		a, _ := o.timed(t, "after-"+strconv.Itoa(i))
		if a.status == http.StatusCreated {
			return i
		}
		wantStoreDown(t, "Redis back, before the probe", a)
		if time.Now().After(deadline) {
			t.Fatalf("Redis back for 30 s, the store still refuses")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRedisKilled: with Redis killed, a keyed request is answered 503 + Retry-After
// well before go-redis itself gives up (its dial retries), the next ones at once,
// and none runs its handler; once Redis is back, requests are served again.
// (Before the store's bound: 503 after go-redis's 1.75 s.)
func TestRedisKilled(t *testing.T) {
	o := newOutage(t)
	if a, _ := o.timed(t, "before"); a.status != http.StatusCreated {
		t.Fatalf("before: %+v", a)
	}
	o.srv.Kill()

	raw := userClient(o.srv)
	start := time.Now()
	err := raw.Ping(context.Background()).Err()
	own := time.Since(start)
	raw.Close()
	if err == nil {
		t.Fatal("a killed Redis answered")
	}

	a, took := o.timed(t, "during")
	wantStoreDown(t, "Redis killed", a)
	t.Logf("Redis killed: go-redis fails after %v, the store's 503 came after %v", own.Round(time.Millisecond), took.Round(time.Millisecond))
	if took >= own/2 {
		t.Errorf("503 after %v: not before half of go-redis's own %v", took, own)
	}
	for i := range 5 {
		a, took := o.timed(t, "during-"+strconv.Itoa(i))
		wantStoreDown(t, "Redis still killed", a)
		if took >= own/2 {
			t.Errorf("503 after %v: not before half of go-redis's own %v", took, own)
		}
	}
	if n := o.ran.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want once (before)", n)
	}

	o.srv.Restart(t)
	refused := o.servedAgain(t)
	t.Logf("Redis back: %d requests refused before the store served again", refused)
	if a, _ := o.timed(t, "after-"+strconv.Itoa(refused)); a.status != http.StatusCreated || !a.replayed {
		t.Fatalf("a repeat once Redis is back: %+v", a)
	}
}

// TestRedisPaused: with Redis stalled (SIGSTOP: connections accepted, nothing
// answered), a keyed request is answered 503 at the store's bound, far before the
// client's read timeout (and its retries); once Redis resumes, requests are served
// again. The store's calls left blocked end with the client. (Before the store's
// bound: a stalled Redis held a request 5 to 10 s.)
func TestRedisPaused(t *testing.T) {
	o := newOutage(t)
	if a, _ := o.timed(t, "before"); a.status != http.StatusCreated {
		t.Fatalf("before: %+v", a)
	}
	if err := o.srv.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			o.srv.Resume()
		}
	}()
	own := o.rdb.Options().ReadTimeout // the least go-redis waits on a stalled Redis
	for i := range 4 {
		a, took := o.timed(t, "during-"+strconv.Itoa(i))
		wantStoreDown(t, "Redis paused", a)
		t.Logf("Redis paused: 503 after %v (go-redis's read timeout %v)", took.Round(time.Millisecond), own)
		if took >= own/2 {
			t.Errorf("503 after %v: not within half of go-redis's read timeout %v", took, own)
		}
	}
	if n := o.ran.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want once (before)", n)
	}
	if err := o.srv.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	refused := o.servedAgain(t)
	t.Logf("Redis resumed: %d requests refused before the store served again", refused)
}

// TestRedisPausedWithinTheWait: by default a keyed request that meets the store
// down waits for the store's next probe while its budget can pay for it
// (dedup.WithStoreWait): Redis paused for less than the request's budget costs it
// latency, not a 503 its caller has no time to come back from; paused longer than
// the wait, it gets the 503 with the time it has left.
func TestRedisPausedWithinTheWait(t *testing.T) {
	srv := redistest.Start(t)
	rdb := userClient(srv)
	store := redisstore.New(rdb)
	var ran atomic.Int64
	web := httptest.NewServer(withTimeout(dedup.NewMiddleware(store)(charge(&ran, nil))))
	t.Cleanup(func() {
		web.Close()
		rdb.Close()
		store.Close()
	})
	if a := post(t, web.URL, "before", "10s"); a.status != http.StatusCreated {
		t.Fatalf("before: %+v", a)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	during := make(chan answer, 1)
	go func() { during <- post(t, web.URL, "during", "10s") }()
	// Paused past the store's bound (250 ms): without the wait the request's 503
	// would be on its way; a 201 can only come after the resume.
	time.Sleep(600 * time.Millisecond)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if a := <-during; a.status != http.StatusCreated {
		t.Fatalf("a request sent while Redis was paused for less than its budget: %+v, want served", a)
	}
	if n := ran.Load(); n != 2 {
		t.Fatalf("the handler ran %d times, want 2", n)
	}
	// Paused for longer than the wait: the 503, with the time left to come back in.
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer srv.Resume()
	a := post(t, web.URL, "long", "10s")
	wantStoreDown(t, "Redis paused past the wait", a)
}

// TestCloseWhilePaused: Close returns once the calls the store abandoned on a
// stalled Redis have returned: at once after the client is closed (goleak checks
// that none is left), and a call after Close fails without reaching Redis.
func TestCloseWhilePaused(t *testing.T) {
	srv := redistest.Start(t)
	rdb := userClient(srv)
	s := redisstore.New(rdb, redisstore.WithTimeout(50*time.Millisecond))
	ctx := t.Context()
	if _, err := s.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer srv.Resume()
	if _, err := s.Get(ctx, "k"); !isUnavailable(err) {
		t.Fatalf("paused: %v, want ErrUnavailable", err)
	}
	rdb.Close()
	s.Close()
	if _, err := s.Get(ctx, "k"); !isUnavailable(err) {
		t.Fatalf("closed: %v, want ErrUnavailable", err)
	}
}

func isUnavailable(err error) bool {
	var ue *dedup.UnavailableError
	return err != nil && errorsAs(err, &ue)
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// doBody is do, with the answer's body.
func doBody(h http.Handler, key string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/charges", strings.NewReader("100"))
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

// TestClusterMasterStalls: on a Cluster, a master that stalls (CLIENT PAUSE: it
// answers no client while the cluster still sees it up) is marked down alone: its
// keys get 503 (the first at the bound, the next at once), while the keys of the
// other masters are served; once it answers again, its keys are served too.
func TestClusterMasterStalls(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()}) // go-redis's defaults
	s := redisstore.New(rdb, redisstore.WithTimeout(time.Second))
	defer func() { rdb.Close(); s.Close() }()
	var n atomic.Int64
	h := dedup.NewMiddleware(s, dedup.WithStoreWait(0))(charge(&n, nil))
	for m := range 3 { // load the slot map and the scripts on every master
		for i := 0; ; i++ {
			code, body := doBody(h, onMaster(c, m, "warm-"+strconv.Itoa(i)+"-"))
			if code == http.StatusCreated {
				break
			}
			if i == 100 {
				t.Fatalf("master %d: %d %s", m, code, body)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	const pause = 5 * time.Second
	if err := c.Admin(c.Masters[0]).Do(t.Context(), "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	code, body := doBody(h, onMaster(c, 0, "stalled-"))
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "did not answer") {
		t.Fatalf("a key on the stalled master: %d %s, want 503 at the bound", code, body)
	}
	code, body = doBody(h, onMaster(c, 0, "stalled-again-"))
	if code != http.StatusServiceUnavailable || strings.Contains(body, "did not answer") {
		t.Fatalf("a second key on the stalled master: %d %s, want 503 at once", code, body)
	}
	for m := 1; m < 3; m++ {
		if code, body := doBody(h, onMaster(c, m, "other-")); code != http.StatusCreated {
			t.Fatalf("a key on master %d while master 0 stalls: %d %s", m, code, body)
		}
	}
	if time.Since(paused) >= pause {
		t.Fatalf("the stall ended (%v) before the test could see it: the machine is too slow", pause)
	}
	time.Sleep(time.Until(paused.Add(pause)))
	for i := 0; ; i++ {
		code, body := doBody(h, onMaster(c, 0, "back-"+strconv.Itoa(i)+"-"))
		if code == http.StatusCreated {
			break
		}
		if i > 1000 {
			t.Fatalf("master 0 answers again, but its keys get %d %s", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAbandonedCallsLandSafely: an Acquire abandoned at the bound on a stalled Redis
// that Redis runs once it resumes gives its lease back (its request got a 503 and
// runs no handler: the lease would block the key for its whole TTL); a completion
// Redis already ran, tried again, succeeds.
func TestAbandonedCallsLandSafely(t *testing.T) {
	srv := redistest.Start(t)
	rdb := userClient(srv)
	defer rdb.Close()
	s := redisstore.New(rdb, redisstore.WithTimeout(50*time.Millisecond))
	ctx := t.Context()
	lease := dedup.Lease{Token: "a", Fingerprint: "fp", TTL: time.Minute}
	if ok, _, err := s.Acquire(ctx, "warm", lease); err != nil || !ok { // loads the script
		t.Fatal(ok, err)
	}
	if err := s.Complete(ctx, "warm", "a", []byte("answer"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "warm", "a", []byte("answer"), time.Minute); err != nil {
		t.Fatalf("a completion tried again: %v", err)
	}
	if err := s.Complete(ctx, "warm", "b", []byte("other"), time.Minute); err != dedup.ErrLeaseLost {
		t.Fatalf("another completion: %v, want ErrLeaseLost", err)
	}

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Acquire(ctx, "k", lease); !isUnavailable(err) {
		srv.Resume()
		t.Fatalf("paused: %v, want ErrUnavailable", err)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	s.Close() // waits for the abandoned Acquire, and its give-back
	if n, err := rdb.Exists(ctx, redisstore.DefaultPrefix+"{k}").Result(); err != nil || n != 0 {
		t.Fatalf("the abandoned Acquire's lease is still held (%d, %v)", n, err)
	}
}

// TestRedisKilledLeavesTheClientUsable: a Redis killed for longer than go-redis
// tolerates with its defaults (its pool fails every call at once, without dialing,
// once as many dials have failed as it has connections, until a redial it tries
// once a second succeeds) under a steady flow of keyed requests: once the store
// knows, it keeps the user's client from giving up, and probes every FirstPause whatever the outage
// lasts (a refused connection costs a dead Redis nothing), so that once Redis is
// back the client serves at once, and the first call the store lets through is
// served: no request fails on the client after Redis is back. (Before: the store's
// calls tripped the pool within half a second, and the store's probes waited up to
// MaxPause; Redis back, the client answered "connection refused" for up to a
// second more.)
func TestRedisKilledLeavesTheClientUsable(t *testing.T) {
	srv := redistest.Start(t)
	rdb := userClient(srv)
	s := redisstore.New(rdb)
	t.Cleanup(func() { rdb.Close(); s.Close() })
	ctx := t.Context()
	for i := range 5 { // a few connections in the pool, the script loaded
		if _, err := s.Get(ctx, "warm-"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	srv.Kill()
	// The first request finds Redis gone: it fails one dial of the pool (as do
	// the requests in flight as Redis goes down: PoolSize of them at once trip the
	// pool, TestRedisBackWhileTheClientIsTripped), and the store knows.
	if _, err := s.Get(ctx, "first"); !isUnavailable(err) {
		t.Fatalf("Redis killed: %v, want dedup.UnavailableError", err)
	}
	// Then twice PoolSize requests at once, and as many again at each of the
	// store's pauses for three seconds: without the store's care, each would fail
	// one dial of the pool.
	pool := rdb.Options().PoolSize
	outage := time.Now()
	for time.Since(outage) < 3*time.Second {
		errs := make(chan error, 2*pool)
		for i := range 2 * pool {
			go func() {
				_, err := s.Get(ctx, "during-"+strconv.Itoa(i))
				errs <- err
			}()
		}
		for range 2 * pool {
			err := <-errs
			var ue *dedup.UnavailableError
			if !errors.As(err, &ue) {
				t.Fatalf("Redis killed: %v, want dedup.UnavailableError", err)
			}
			if time.Since(outage) > time.Second && ue.Err == nil && ue.RetryIn > redisstore.FirstPause {
				t.Fatalf("Redis refusing connections for %v: next probe in %v, want within FirstPause (%v)",
					time.Since(outage).Round(time.Millisecond), ue.RetryIn, redisstore.FirstPause)
			}
		}
		time.Sleep(redisstore.FirstPause / 2)
	}
	srv.Restart(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis back, the user's client: %v, want served", err)
	}
	for i := 0; ; i++ {
		_, err := s.Get(ctx, "after-"+strconv.Itoa(i))
		if err == nil {
			break
		}
		var ue *dedup.UnavailableError
		if !errors.As(err, &ue) || ue.Err != nil {
			t.Fatalf("Redis back, a call the store let through failed: %v", err)
		}
		if ue.RetryIn > redisstore.FirstPause {
			t.Fatalf("Redis back: next probe in %v, want within FirstPause (%v)", ue.RetryIn, redisstore.FirstPause)
		}
		time.Sleep(ue.RetryIn)
	}
}

// TestRedisBackWhileTheClientIsTripped: when the user's client gave up on a killed
// Redis all the same (its own calls, or as many of the store's in flight as Redis
// went down as its pool has connections), the store's probes, which then cost Redis
// nothing, stay FirstPause apart, and the store serves again as soon as the client
// does (within a second of Redis's return, when go-redis's pool redials).
func TestRedisBackWhileTheClientIsTripped(t *testing.T) {
	srv := redistest.Start(t)
	rdb := userClient(srv)
	s := redisstore.New(rdb)
	t.Cleanup(func() { rdb.Close(); s.Close() })
	ctx := t.Context()
	if _, err := s.Get(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	// The pool redials once a second: on a loaded machine Redis may take longer than
	// that to restart, and the pool's redial finds it back before the check. Up to 5
	// outages, until one leaves the client tripped when Redis is back.
	for outage := 1; ; outage++ {
		srv.Kill()
		pool := rdb.Options().PoolSize
		errs := make(chan error, 2*pool)
		for range 2 * pool { // the user's own calls: each fails a dial of the pool
			go func() { errs <- rdb.Ping(ctx).Err() }()
		}
		for range 2 * pool {
			if err := <-errs; err == nil {
				t.Fatal("a killed Redis answered")
			}
		}
		srv.Restart(t)
		if err := rdb.Ping(ctx).Err(); err != nil {
			break
		}
		if outage == 5 {
			t.Fatal("the client served at once after its calls failed PoolSize dials, 5 times: nothing to check (has go-redis changed its pool?)")
		}
	}
	for i := 0; ; i++ {
		_, err := s.Get(ctx, "after-"+strconv.Itoa(i))
		if err == nil {
			break
		}
		var ue *dedup.UnavailableError
		if !errors.As(err, &ue) {
			t.Fatalf("Redis back, the client tripped: %v, want dedup.UnavailableError", err)
		}
		if ue.RetryIn > redisstore.FirstPause {
			t.Fatalf("Redis back, the client tripped: next probe in %v, want within FirstPause (%v)", ue.RetryIn, redisstore.FirstPause)
		}
		if i > 1000 {
			t.Fatalf("Redis back for %d probes, the store still refuses: %v", i, err)
		}
		time.Sleep(ue.RetryIn)
	}
}

// holdReply is a go-redis hook that holds the return of the first command whose
// arguments contain mark until release is closed, after telling landed that Redis
// answered it.
type holdReply struct {
	mark    string
	fired   atomic.Bool
	landed  chan struct{}
	release chan struct{}
}

func (h *holdReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if strings.Contains(fmt.Sprint(cmd.Args()...), h.mark) && h.fired.CompareAndSwap(false, true) {
			close(h.landed)
			<-h.release
		}
		return err
	}
}

func (h *holdReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if strings.Contains(fmt.Sprint(cmd.Args()...), h.mark) && h.fired.CompareAndSwap(false, true) {
				close(h.landed)
				<-h.release
				break
			}
		}
		return err
	}
}

// TestAbandonedLeaseDoesNotBlockItsKey: an Acquire abandoned at the bound that Redis
// runs after all holds a lease no request runs under (its request got a 503) until
// the call returns and gives it back. A request with the same key that meets that
// lease first (the same request's next try with a fresh token, once the store is
// back) takes the key, instead of being told that the key runs, for the lease's
// whole TTL: after an outage, under load, payments got 409 "conflict" for the lease
// of their own earlier try.
func TestAbandonedLeaseDoesNotBlockItsKey(t *testing.T) {
	srv := redistest.Start(t)
	rdb := userClient(srv)
	hold := &holdReply{mark: "abandoned-token", landed: make(chan struct{}), release: make(chan struct{})}
	rdb.AddHook(hold)
	s := redisstore.New(rdb, redisstore.WithTimeout(50*time.Millisecond))
	released := false
	t.Cleanup(func() {
		if !released {
			close(hold.release)
		}
		rdb.Close()
		s.Close()
	})
	ctx := t.Context()
	if ok, _, err := s.Acquire(ctx, "warm", dedup.Lease{Token: "w", Fingerprint: "fp", TTL: time.Minute}); err != nil || !ok { // loads the script
		t.Fatal(ok, err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	first := dedup.Lease{Token: "abandoned-token", Fingerprint: "fp", TTL: time.Minute}
	if _, _, err := s.Acquire(ctx, "k", first); !isUnavailable(err) {
		srv.Resume()
		t.Fatalf("paused: %v, want ErrUnavailable", err)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	<-hold.landed // Redis ran the abandoned Acquire: its lease is held, not yet given back
	takesTheKeyFromAnAbandonedLease(t, s, rdb, hold, &released)
}

// takesTheKeyFromAnAbandonedLease: once Redis answers again, the next try of the
// request whose Acquire s abandoned (a fresh token) takes key "k", as long as the
// abandoned call is held; then hold is released, s closed (it waits for the call's
// give-back), and the key must hold the next try's lease.
func takesTheKeyFromAnAbandonedLease(t *testing.T, s *redisstore.Store, rdb *redis.Client, hold *holdReply, released *bool) {
	t.Helper()
	ctx := t.Context()
	next := dedup.Lease{Token: "next-token", Fingerprint: "fp", TTL: time.Minute}
	for i := 0; ; i++ {
		ok, e, err := s.Acquire(ctx, "k", next)
		if err == nil {
			if !ok {
				t.Fatalf("the abandoned Acquire's lease blocks its key: %+v", e)
			}
			break
		}
		var ue *dedup.UnavailableError
		if !errors.As(err, &ue) || i > 100 { // the lease would end after 600 tries
			t.Fatalf("Redis answers again: %v", err)
		}
		time.Sleep(ue.RetryIn)
	}
	close(hold.release) // the abandoned call returns, and gives back what it no longer holds
	*released = true
	s.Close() // waits for the abandoned call's give-back
	if v, err := rdb.Get(ctx, redisstore.DefaultPrefix+"{k}").Result(); err != nil || !strings.HasPrefix(v, "Rnext-token\n") {
		t.Fatalf("the key's record after the give-back: %q %v, want the next lease's", v, err)
	}
}
