package exactlyonce_test

import (
	"context"
	"errors"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/dedup"
)

// rngFor is the random source of one decision, from the seed and the decision's
// coordinates: the same seed makes the same decisions, whatever the interleaving,
// in every process (a fixed hash: replica processes draw as their parent does).
func rngFor(seed uint64, parts ...string) *rand.Rand {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// Fault names, on the wire in X-Fault / x-fault.
const (
	faultLose      = "lose"       // the client's transport drops the answer after the server answered
	faultCutBefore = "cut-before" // the replica cuts the connection before the request runs
	faultCutAfter  = "cut-after"  // the replica runs the request, then cuts the connection
)

// attemptFault draws the fault of one attempt.
func attemptFault(rng *rand.Rand, rate float64) string {
	x := rng.Float64() / rate
	switch {
	case x < 0.08:
		return faultLose
	case x < 0.12:
		return faultCutBefore
	case x < 0.18:
		return faultCutAfter
	}
	return ""
}

// callInfo rides on the context of a logical request's calls, for the layers
// beneath the stack.
type callInfo struct {
	l        *logical
	attempts atomic.Int32
}

type callKey struct{}

// faultRT is the base of the stack's HTTP and connect transports: each attempt goes
// to a replica and may meet a fault.
type faultRT struct {
	name  string // "http", "connect"
	h     *history
	seed  uint64
	rate  float64
	hosts []string
	base  http.RoundTripper
}

func (f *faultRT) RoundTrip(req *http.Request) (*http.Response, error) {
	ci, _ := req.Context().Value(callKey{}).(*callInfo)
	if ci == nil {
		return f.base.RoundTrip(req)
	}
	n := ci.attempts.Add(1)
	key := strings.Trim(req.Header.Get("Idempotency-Key"), `"`)
	if key != "" {
		f.h.setKey(ci.l.ID, key)
	}
	rng := rngFor(f.seed, "attempt", strconv.Itoa(ci.l.ID), strconv.Itoa(int(n)))
	host := f.hosts[rng.IntN(len(f.hosts))]
	fault := attemptFault(rng, f.rate)
	r := req.Clone(req.Context())
	r.URL.Host, r.Host = host, ""
	if fault == faultCutBefore || fault == faultCutAfter {
		r.Header.Set("X-Fault", fault)
	}
	if fault != "" {
		f.h.count(f.name + " " + fault)
	}
	f.h.event(ci.l.Scope, key, "logical #%d attempt %d → %s fault=%q previous=%q", ci.l.ID, n, host, fault, req.Header.Get("Grpc-Previous-Rpc-Attempts"))
	resp, err := f.base.RoundTrip(r)
	if fault == faultLose && err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return resp, err
}

// faultInterceptor is the innermost interceptor of the stack's gRPC client: each
// attempt may meet a fault.
func faultInterceptor(h *history, seed uint64, rate float64) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ci, _ := ctx.Value(callKey{}).(*callInfo)
		if ci == nil {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		n := ci.attempts.Add(1)
		md, _ := metadata.FromOutgoingContext(ctx)
		key := ""
		if vs := md.Get("idempotency-key"); len(vs) > 0 {
			key = strings.Trim(vs[len(vs)-1], `"`)
			h.setKey(ci.l.ID, key)
		}
		rng := rngFor(seed, "attempt", strconv.Itoa(ci.l.ID), strconv.Itoa(int(n)))
		fault := attemptFault(rng, rate)
		if fault == faultCutBefore || fault == faultCutAfter {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-fault", fault)
		}
		if fault != "" {
			h.count("grpc " + fault)
		}
		h.event(ci.l.Scope, key, "logical #%d attempt %d fault=%q previous=%v", ci.l.ID, n, fault, md.Get("grpc-previous-rpc-attempts"))
		err := invoker(ctx, method, req, reply, cc, opts...)
		if fault == faultLose && err == nil {
			return status.Error(codes.Unavailable, "exactlyonce: the answer was lost")
		}
		return err
	}
}

// faultHandler is a replica's outermost HTTP handler: it sets the tenant (as an
// authenticating proxy would) and cuts connections as the attempt's fault says.
func faultHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(context.WithValue(r.Context(), tenantKey{}, r.Header.Get("X-Tenant")))
		switch r.Header.Get("X-Fault") {
		case faultCutBefore:
			panic(http.ErrAbortHandler)
		case faultCutAfter:
			next.ServeHTTP(httptest.NewRecorder(), r) // the answer never leaves
			panic(http.ErrAbortHandler)
		}
		next.ServeHTTP(w, r)
	})
}

// conns tracks a listener's connections by the peer's address, so that a replica
// can cut the connection of a call.
type conns struct {
	net.Listener
	mu sync.Mutex
	m  map[string]net.Conn
}

func (l *conns) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.m[c.RemoteAddr().String()] = c
		l.mu.Unlock()
	}
	return c, err
}

func (l *conns) cut(ctx context.Context) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return
	}
	l.mu.Lock()
	c := l.m[p.Addr.String()]
	delete(l.m, p.Addr.String())
	l.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// serverFaults is a replica's outermost gRPC interceptors: it turns a panic into
// Internal (grpc-go does not recover), sets the tenant, and cuts connections as the
// attempt's fault says.
func serverFaults(l *conns) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				resp, err = nil, status.Errorf(codes.Internal, "panic: %v", p)
			}
		}()
		md, _ := metadata.FromIncomingContext(ctx)
		if vs := md.Get("x-tenant"); len(vs) > 0 {
			ctx = context.WithValue(ctx, tenantKey{}, vs[0])
		}
		switch f := md.Get("x-fault"); {
		case len(f) > 0 && f[0] == faultCutBefore:
			l.cut(ctx)
			return nil, status.Error(codes.Unavailable, "exactlyonce: cut")
		case len(f) > 0 && f[0] == faultCutAfter:
			resp, err = handler(ctx, req)
			l.cut(ctx)
			return resp, err
		}
		return handler(ctx, req)
	}
}

var errInjected = errors.New("exactlyonce: injected store failure")

// faultStore wraps a dedup.Store with delays, stalls (blocked until the context
// ends) and failures drawn from the seed; completions and releases fail only
// transiently (their first call), so that a lease the middleware retries is never
// lost for good. It also checks every lease it grants against its request's deadline.
type faultStore struct {
	dedup.Store
	h      recorder
	seed   uint64
	rate   float64
	margin time.Duration
	off    atomic.Bool
	mu     sync.Mutex
	n      map[string]int  // calls per key and operation
	failed map[string]bool // tokens whose completion or release failed once
	keys   map[string]bool // every store key acquired
}

func newFaultStore(s dedup.Store, h recorder, seed uint64, rate float64, margin time.Duration) *faultStore {
	return &faultStore{Store: s, h: h, seed: seed, rate: rate, margin: margin,
		n: map[string]int{}, failed: map[string]bool{}, keys: map[string]bool{}}
}

// storeKeys returns every store key a lease was asked for.
func (s *faultStore) storeKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.keys))
	for k := range s.keys {
		keys = append(keys, k)
	}
	return keys
}

// splitKey reads dedup's store key, "len(scope):scope:key".
func splitKey(k string) (scope, key string) {
	i := strings.IndexByte(k, ':')
	n, err := strconv.Atoi(k[:max(i, 0)])
	if err != nil || i+1+n+1 > len(k) {
		return "", k
	}
	return k[i+1 : i+1+n], k[i+1+n+1:]
}

// draw returns the fault of one call: "delay", "stall", "error" or "".
func (s *faultStore) draw(op, key string, stall bool) (string, time.Duration) {
	if s.off.Load() {
		return "", 0
	}
	s.mu.Lock()
	s.n[op+key]++
	n := s.n[op+key]
	s.mu.Unlock()
	rng := rngFor(s.seed, "store", op, key, strconv.Itoa(n))
	x := rng.Float64() / s.rate
	switch {
	case x < 0.04:
		return "delay", time.Duration(1+rng.IntN(30)) * time.Millisecond
	case x < 0.05 && stall:
		return "stall", 0
	case x < 0.06:
		return "error", 0
	}
	return "", 0
}

// inject applies a fault; a non-nil error is the call's.
func (s *faultStore) inject(ctx context.Context, op, key string, stall bool) error {
	f, d := s.draw(op, key, stall)
	if f == "" {
		return nil
	}
	scope, k := splitKey(key)
	s.h.count("store " + op + " " + f)
	s.h.event(scope, k, "store %s: injected %s %v", op, f, d)
	switch f {
	case "delay":
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	case "stall":
		<-ctx.Done()
		return ctx.Err()
	}
	return errInjected
}

func (s *faultStore) Acquire(ctx context.Context, key string, l dedup.Lease) (bool, dedup.Entry, error) {
	most := s.mostLease(ctx, key)
	if err := s.inject(ctx, "acquire", key, true); err != nil {
		return false, dedup.Entry{}, err
	}
	got, e, err := s.Store.Acquire(ctx, key, l)
	scope, k := splitKey(key)
	s.h.event(scope, k, "store acquire ttl=%v: got=%v state=%v left=%v err=%v", l.TTL, got, e.State, e.Left, err)
	if got && err == nil {
		s.checkLease(key, l, most)
	}
	return got, e, err
}

// mostLease notes key, and returns the longest lease its request may be granted:
// its deadline plus the margin, as the call begins.
func (s *faultStore) mostLease(ctx context.Context, key string) time.Duration {
	s.mu.Lock()
	s.keys[key] = true
	s.mu.Unlock()
	if d, ok := ctx.Deadline(); ok {
		return time.Until(d) + s.margin
	}
	return deadline.DefaultBudget + s.margin
}

// checkLease: a lease granted ends with its request's deadline plus the margin
// (most, read as the call began). A lease asked for and not granted (the store
// failed, or the context ended first) holds nothing.
func (s *faultStore) checkLease(key string, l dedup.Lease, most time.Duration) {
	if l.TTL > most+leaseSlack {
		scope, k := splitKey(key)
		s.h.violated(violation{"no lease outlives its deadline + margin", scope, k,
			"lease of " + l.TTL.String() + " for a request with " + (most - s.margin).String() + " left"})
	}
}

func (s *faultStore) Complete(ctx context.Context, key, token string, answer []byte, retain time.Duration) error {
	scope, k := splitKey(key)
	// Noted before the call, so that a report tells a completion never made from
	// one cut short by its process's death, which notes nothing after.
	s.h.event(scope, k, "store complete called (%d bytes)", len(answer))
	began := time.Now() // an injected delay is the store's slowness: the call began here
	if err := s.once(ctx, "complete", key, token); err != nil {
		// A completion failed like a store's own failure: dedup tries it again
		// until its lease ends, and if no try lands (its process starved past
		// the lease, seen under -race), the key may run again after the lease.
		s.h.storeFailed(scope, k, began)
		return err
	}
	err := s.Store.Complete(ctx, key, token, answer, retain)
	switch {
	case err == nil:
		s.h.stored(scope, k)
	case errors.Is(err, dedup.ErrLeaseLost):
		s.h.leaseLost(scope, k)
	default:
		s.h.storeFailed(scope, k, began)
	}
	s.h.event(scope, k, "store complete (%d bytes): %v", len(answer), err)
	return err
}

func (s *faultStore) Release(ctx context.Context, key, token string) error {
	if err := s.once(ctx, "release", key, token); err != nil {
		return err
	}
	err := s.Store.Release(ctx, key, token)
	scope, k := splitKey(key)
	s.h.event(scope, k, "store release: %v", err)
	return err
}

// once injects a fault into a completion or a release, failing at most its first
// call for a token.
func (s *faultStore) once(ctx context.Context, op, key, token string) error {
	s.mu.Lock()
	again := s.failed[op+token]
	s.mu.Unlock()
	if again {
		return nil
	}
	err := s.inject(ctx, op, key, false)
	if errors.Is(err, errInjected) {
		s.mu.Lock()
		s.failed[op+token] = true
		s.mu.Unlock()
	}
	return err
}

func (s *faultStore) Get(ctx context.Context, key string) (dedup.Entry, error) {
	if err := s.inject(ctx, "get", key, true); err != nil {
		return dedup.Entry{}, err
	}
	return s.Store.Get(ctx, key)
}

func (s *faultStore) Wait(ctx context.Context, key string) (dedup.Entry, error) {
	if err := s.inject(ctx, "wait", key, true); err != nil {
		return dedup.Entry{}, err
	}
	return s.Store.Wait(ctx, key)
}
