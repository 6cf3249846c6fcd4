package exactlyonce_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/retry"
)

// run drives the logical requests of one history.
type run struct {
	c    *cluster
	h    *history
	seed uint64
}

// drawPlan draws what the handler does for a pair of logical requests.
func drawPlan(rng *rand.Rand) plan {
	p := plan{Kind: "ok", Size: 40 + rng.IntN(4000), Trailer: rng.IntN(10) < 3}
	switch x := rng.IntN(100); {
	case x < 8:
		p.Kind = "fail4"
	case x < 16:
		p.Kind = "fail5"
	case x < 23:
		p.Kind = "forget"
	case x < 30:
		p.Kind = "e504"
	case x < 36:
		p.Kind = "panic"
	case x < 42:
		p.Kind = "big"
		p.Size = maxResponse*5/4 + rng.IntN(maxResponse)
	}
	switch x := rng.IntN(100); {
	case x < 70:
		p.Work = rng.IntN(4)
	case x < 92:
		p.Work = 5 + rng.IntN(40)
	default:
		p.Work = 50 + rng.IntN(350)
	}
	return p
}

// logical draws logical request i. Requests 2j and 2j+1 are a pair: the same
// protocol and plan, tenants a and b, and often one key for both (and then, half
// of the time, one body).
func (r *run) logical(i int) *logical {
	pair := rngFor(r.seed, "pair", strconv.Itoa(i/2))
	own := rngFor(r.seed, "logical", strconv.Itoa(i))
	l := &logical{ID: i, Scope: []string{"tenant-a", "tenant-b"}[i%2], Proto: "http", Client: "stack"}
	switch x := pair.IntN(100); {
	case x < 32:
		l.Proto = "grpc"
	case x < 64:
		l.Proto, l.Wire = "connect", drawWire(pair)
	}
	l.Plan = drawPlan(pair)
	shared, sameBody := pair.IntN(100) < 40, pair.IntN(2) == 0
	if i%2 == 1 && !sameBody {
		l.Plan.Nonce = 1
	}
	if own.IntN(100) < 30 {
		l.Client = "raw"
	}
	switch {
	case shared:
		l.Key = fmt.Sprintf("s%d-%d", r.seed, i/2)
	case l.Client == "raw":
		l.Key = fmt.Sprintf("r%d-%d", r.seed, i)
	}
	l.Body, _ = json.Marshal(l.Plan)
	return l
}

// one runs logical request i: a call through the stack or raw sends, then, when no
// answer settled it, resends of its key by hand.
func (r *run) one(ctx context.Context, i int) {
	l := r.logical(i)
	key := l.Key
	l.Key = ""
	r.h.addLogical(l)
	if key != "" {
		r.h.setKey(i, key)
	}
	own := rngFor(r.seed, "client", strconv.Itoa(i))
	timeout := time.Duration(200+own.IntN(1300)) * time.Millisecond
	if own.IntN(100) < 15 {
		timeout = time.Duration(15+own.IntN(45)) * time.Millisecond
	}
	truncate := 0
	if l.Proto != "grpc" && own.IntN(100) < 6 {
		truncate = 1 + own.IntN(200)
	}
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, callKey{}, &callInfo{l: l}), timeout)
	defer cancel()
	if own.IntN(100) < 5 {
		t := time.AfterFunc(time.Duration(own.Int64N(int64(timeout))), cancel)
		defer t.Stop()
	}
	var settled bool
	if l.Client == "stack" {
		settled = r.send(ctx, l, "stack", truncate, own).settled()
	} else {
		settled = r.rawSends(ctx, l, truncate, own)
	}
	if settled || own.IntN(100) >= 60 {
		return
	}
	r.resend(l, own)
}

// rawSends sends l's key by hand once or twice, sometimes two copies at once.
func (r *run) rawSends(ctx context.Context, l *logical, truncate int, rng *rand.Rand) bool {
	if rng.IntN(100) < 30 {
		var wg sync.WaitGroup
		var ok [2]bool
		for k := range 2 {
			wg.Go(func() {
				ok[k] = r.send(ctx, l, "raw", truncate, rngFor(r.seed, "copy", strconv.Itoa(l.ID), strconv.Itoa(k))).settled()
			})
		}
		wg.Wait()
		return ok[0] || ok[1]
	}
	return r.send(ctx, l, "raw", truncate, rng).settled()
}

// resend sends l's key again by hand, up to three times, until an answer settles it.
func (r *run) resend(l *logical, rng *rand.Rand) {
	r.h.mu.Lock()
	key := r.h.logs[l.ID].Key
	r.h.mu.Unlock()
	if key == "" {
		return // the stack never sent it
	}
	for n := range 3 {
		time.Sleep(time.Duration(n*20) * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		s := r.send(ctx, l, "raw-resend", 0, rng)
		cancel()
		if s.settled() {
			return
		}
	}
}

// settled reports whether the answer ends the client's interest: an execution's
// answer read in full, or the not-kept refusal.
func (s seen) settled() bool {
	return s.Err == "" && !s.Truncated && (s.ExecID != 0 || s.notKept())
}

// notKept reports whether s is dedup's refusal of a repeat whose first answer was
// completed but not kept (410 Gone / AlreadyExists, naming it in its message). It is
// not the stored answer, so it is never marked replayed: [history.checkSeen] checks.
func (s seen) notKept() bool {
	return ((s.Proto == "http" && s.Ans.Status == http.StatusGone) || (s.Proto != "http" && s.Ans.Status == int(codes.AlreadyExists))) &&
		bytes.Contains(s.Ans.Body, []byte("not kept"))
}

// send makes one call for l, through the stack (via "stack") or raw, and records
// what the client saw.
func (r *run) send(ctx context.Context, l *logical, via string, truncate int, rng *rand.Rand) seen {
	s := r.call(ctx, l, via, truncate, rng)
	r.h.saw(s)
	return s
}

// call makes one call for l, and returns what the client saw. A key of a gRPC or
// connect request is sent by hand (a resend, the final probe) over the other of the
// two a quarter of the time: they share the procedure, so it is the same request.
func (r *run) call(ctx context.Context, l *logical, via string, truncate int, rng *rand.Rand) seen {
	r.h.mu.Lock()
	key := r.h.logs[l.ID].Key
	r.h.mu.Unlock()
	proto, wire := l.Proto, l.Wire
	if (via == "raw-resend" || via == "probe") && proto != "http" && rng.IntN(100) < 25 {
		proto, wire = "connect", drawWire(rng)
		if l.Proto == "connect" {
			proto, wire = "grpc", ""
		}
	}
	var s seen
	switch proto {
	case "http":
		s = r.sendHTTP(ctx, l, key, via, truncate, rng)
	case "grpc":
		s = r.sendGRPC(ctx, l, key, via)
	default:
		s = r.sendConnect(ctx, l, key, via, wire, truncate, rng)
	}
	r.h.mu.Lock()
	s.Logical, s.Via, s.Proto, s.Wire, s.Scope, s.Key = l.ID, via, proto, wire, l.Scope, r.h.logs[l.ID].Key
	r.h.mu.Unlock()
	return s
}

func (r *run) sendHTTP(ctx context.Context, l *logical, key, via string, truncate int, rng *rand.Rand) seen {
	client, host := r.c.rawHTTP, r.c.hosts[rng.IntN(len(r.c.hosts))]
	if via == "stack" {
		client = r.c.stackHTTP
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+host+"/pay", bytes.NewReader(l.Body))
	if err != nil {
		return seen{Err: err.Error()}
	}
	req.Header.Set("X-Tenant", l.Scope)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		s := seen{Err: err.Error()}
		// An answer the retry layer could not keep while it waited (its body cut
		// by a killed replica, or slower than the layer's bounds) was not received
		// whole: the layer says so (StopError.Unkept) and has nothing to return.
		var stop *retry.StopError
		if se := (*retry.StatusError)(nil); errors.As(err, &se) && !(errors.As(err, &stop) && stop.Unkept) {
			s.StatusAsError = se.StatusCode
		}
		return s
	}
	defer resp.Body.Close()
	var s seen
	var body []byte
	if truncate > 0 {
		body, err = io.ReadAll(io.LimitReader(resp.Body, int64(truncate)))
		s.Truncated = true
	} else {
		body, err = io.ReadAll(resp.Body)
	}
	if err != nil {
		s.Truncated = true // a prefix, checked as one
	}
	s.Ans = answer{Status: resp.StatusCode, Body: body, Header: appHeaders(resp.Header, "X-App-", "Content-Type"), Trailer: appHeaders(resp.Trailer, "X-App-")}
	s.Replayed = resp.Header.Get(dedup.ReplayedHeader) == "true"
	s.ExecID = execOf(body, resp.Header.Get("X-App-Exec"))
	return s
}

// stopSuffix is what the retry layer appends to the last attempt's message when it
// stops under the deadline rule or its budget (retry.StopError).
var stopSuffix = regexp.MustCompile(`; (not retried|stopped after [0-9]+ attempts): [^;]*$`)

// unannotate undoes the retry layer's documented rewriting of a gRPC failure it
// stopped retrying (retry.StopError: DEADLINE_EXCEEDED under the deadline rule, the
// reason after the message), so that the answer underneath is checked.
func unannotate(code int, msg []byte) (int, []byte, bool) {
	loc := stopSuffix.FindIndex(msg)
	if loc == nil {
		return code, msg, false
	}
	return -1, msg[:loc[0]], true
}

// appHeaders keeps the handler's own headers.
func appHeaders(h map[string][]string, keep ...string) map[string][]string {
	var out map[string][]string
	for k, v := range h {
		for _, p := range keep {
			if strings.HasPrefix(k, p) {
				if out == nil {
					out = map[string][]string{}
				}
				out[k] = v
			}
		}
	}
	return out
}

// execOf reads the execution an answer names: in its header (hdr), or at the start
// of its body (an error's message may come without the metadata).
func execOf(b []byte, hdr string) int64 {
	if n, err := strconv.ParseInt(hdr, 10, 64); err == nil {
		return n
	}
	s, ok := strings.CutPrefix(string(b[:min(len(b), 32)]), "exec=")
	if !ok {
		return 0
	}
	if i := strings.IndexByte(s, ' '); i > 0 {
		n, _ := strconv.ParseInt(s[:i], 10, 64)
		return n
	}
	return 0
}

func (r *run) sendGRPC(ctx context.Context, l *logical, key, via string) seen {
	client := r.c.rawGRPC
	if via == "stack" {
		client = r.c.stackGRPC
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "x-tenant", l.Scope)
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
	}
	var hdr, trl metadata.MD
	resp, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: l.Body}}, grpc.Header(&hdr), grpc.Trailer(&trl))
	st := status.Convert(err)
	if strings.HasPrefix(st.Message(), "exactlyonce: ") { // an injected fault, not an answer
		return seen{Err: st.String()}
	}
	s := seen{Ans: answer{Status: int(st.Code()), Body: []byte(st.Message())}}
	if err == nil {
		s.Ans.Body = resp.GetPayload().GetBody()
	}
	all := metadata.Join(hdr, trl)
	s.Replayed = len(all.Get(dedup.ReplayedKey)) > 0 && all.Get(dedup.ReplayedKey)[0] == "true"
	s.Ans.Header = appHeaders(all, "x-app-exec", "x-app-kind")
	s.Ans.Trailer = appHeaders(all, "x-app-trailer")
	hdrExec := ""
	if err == nil { // an error's execution is named in its message: a call that failed after the header came names none
		hdrExec = strings.Join(all.Get("x-app-exec"), ",")
	}
	s.ExecID = execOf(s.Ans.Body, hdrExec)
	if err != nil && s.ExecID == 0 && s.Replayed {
		// The header came with an attempt whose answer was then lost; the status is
		// a later attempt's (grpc.Header is filled by every attempt that gets one).
		s.Replayed, s.Err = false, "the status of a later attempt, with the replayed header of an earlier one: "+st.String()
	}
	if via == "stack" && err != nil {
		s.Ans.Status, s.Ans.Body, s.Annotated = unannotate(s.Ans.Status, s.Ans.Body)
	}
	return s
}

// probe asks, once no fault remains, for the answer of every key that completed:
// it must be replayed.
func (r *run) probe() {
	r.warmUp()
	r.h.mu.Lock()
	r.h.probeAt = r.h.since()
	var ls []*logical
	done := map[string]bool{}
	for _, e := range r.h.execs {
		k := sk(e.Scope, e.Key)
		if e.Released == "" && !done[k] {
			done[k] = true
			ls = append(ls, r.h.logs[r.h.byKey[k]])
		}
	}
	r.h.mu.Unlock()
	work := make(chan *logical)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for l := range work {
				r.probeOne(l)
			}
		})
	}
	for _, l := range ls {
		work <- l
	}
	close(work)
	wg.Wait()
}

// probeOne asks for l's answer, and records it.
func (r *run) probeOne(l *logical) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	r.send(ctx, l, "probe", 0, rngFor(r.seed, "probe", strconv.Itoa(l.ID)))
}

// warmUp sends each connect replica one new keyed request, a logical request of the
// history like the others, before the probe. A connect server replays a stored
// answer only once it has answered the procedure itself (connectkit learns the
// response type from a first answer, and refuses a replay before it, Unavailable,
// for the client to come back): in a process run, a replica restarted as the run
// ended has had no request yet, and in a live service it would have.
func (r *run) warmUp() {
	r.h.mu.Lock()
	first := len(r.h.logs)
	r.h.mu.Unlock()
	for i := range replicas {
		p := plan{Kind: "ok", Size: 100}
		l := &logical{ID: first + i, Scope: "tenant-a", Proto: "connect", Wire: "connect", Client: "raw"}
		l.Plan, l.Body = p, must(json.Marshal(p))
		r.h.addLogical(l)
		r.h.setKey(l.ID, fmt.Sprintf("w%d-%d", r.seed, i))
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), replicaKey{}, i), 3*time.Second)
		r.send(ctx, l, "warm-up", 0, rngFor(r.seed, "warm-up", strconv.Itoa(i)))
		cancel()
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// replicaKey is the context key of the replica a raw connect call goes to.
type replicaKey struct{}
