package exactlyonce_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
)

// answer is one answer as the handler produced it or as a client saw it, reduced to
// what deduplication promises to keep: the status (HTTP status or gRPC code), the
// handler's own headers and trailers (X-App-*, Content-Type), and the body (gRPC: the
// response's payload, or the status message).
type answer struct {
	Status  int
	Header  map[string][]string
	Trailer map[string][]string
	Body    []byte
}

func (a answer) String() string {
	b := a.Body
	if len(b) > 48 {
		b = append(slices.Clip(b[:48]), "…"...)
	}
	return fmt.Sprintf("%d h=%v t=%v body(%d)=%q", a.Status, a.Header, a.Trailer, len(a.Body), b)
}

// diff says how got differs from want, or "".
func (a answer) diff(got answer) string {
	var d []string
	if a.Status != got.Status {
		d = append(d, fmt.Sprintf("status %d, want %d", got.Status, a.Status))
	}
	if !maps.EqualFunc(a.Header, got.Header, slices.Equal) {
		d = append(d, fmt.Sprintf("header %v, want %v", got.Header, a.Header))
	}
	if !maps.EqualFunc(a.Trailer, got.Trailer, slices.Equal) {
		d = append(d, fmt.Sprintf("trailer %v, want %v", got.Trailer, a.Trailer))
	}
	if !bytes.Equal(a.Body, got.Body) {
		d = append(d, fmt.Sprintf("body of %d bytes, want %d (first difference at %d)", len(got.Body), len(a.Body), firstDiff(a.Body, got.Body)))
		if len(got.Body) < 200 {
			d = append(d, fmt.Sprintf("body %q", got.Body))
		}
	}
	return strings.Join(d, "; ")
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// execution is one run of the handler for a keyed request.
type execution struct {
	ID         int64
	Scope, Key string
	Proto      string
	Replica    string
	Start, End time.Duration // since the run began
	Ans        answer
	// Released says why deduplication was told to give the key up ("forget",
	// "504", "499", "deadline", "panic"), or "" for an execution that completed.
	Released string
	Nth      int // executions of the key that began before this one
	// LeaseEnd is when the lease of the request ends: its deadline plus the margin.
	LeaseEnd time.Duration
	// Inc is the replica process (its incarnation) that ran it, 0 in the test's own.
	Inc int
	// Killed: it never returned, because its process was killed (End is then the
	// kill's time). Its lease holds until LeaseEnd.
	Killed bool
	ended  bool
}

// seen is what a client saw for one call: an answer or an error.
type seen struct {
	Logical   int
	Scope     string
	Key       string
	Proto     string // "http", "grpc", "connect"
	Wire      string // connect's protocol: "connect", "grpc", "grpcweb"
	Via       string // "stack", "raw", "raw-resend", "warm-up", "probe"
	At        time.Duration
	Err       string
	Ans       answer
	Replayed  bool
	Truncated bool // the client read part of the body and closed
	// Annotated: the client's retry layer stopped and rewrote the failure's code
	// (Status is then -1, not checked) and appended its reason (taken off Body).
	Annotated bool
	// StatusAsError is the status of an HTTP answer the stack turned into an error
	// (a retry.StatusError), losing the body.
	StatusAsError int
	ExecID        int64 // the execution the answer names (its body starts "exec=N "), 0 none
}

// logical is one logical request: a scope, a key (empty until the stack generated
// it), a body.
type logical struct {
	ID         int
	Scope, Key string
	Proto      string
	Wire       string // connect's protocol (wires)
	Client     string
	Plan       plan
	Body       []byte
}

// recorder is where a replica records its handler's executions and what its store
// saw: the history itself in the test's process, a replica process's log file in a
// replica process (merged into the history by the test).
type recorder interface {
	beginExec(ctx context.Context, scope, key, proto, replica string) *execution
	endExec(e *execution, a answer, released string)
	event(scope, key, format string, args ...any)
	leaseLost(scope, key string)                    // a completion found its lease lost
	stored(scope, key string)                       // a completion was stored
	storeFailed(scope, key string, began time.Time) // the store failed a completion begun then (not an injected fault)
	violated(v violation)                           // a store call broke an invariant
	count(kind string)                              // a fault was injected
}

// storeRestart is one restart of the store: down from Stop until Back; Lossy when
// it kept nothing (no persistence), so that every record written before Stop is gone.
type storeRestart struct {
	Stop, Back time.Duration
	Lossy      bool
}

// keyEvent is a line of a key's history, at its time.
type keyEvent struct {
	At   time.Duration
	Line string
}

// history records everything, and the events of each key for the report.
type history struct {
	start time.Time
	mu    sync.Mutex
	execs map[int64]*execution
	nexec int64
	seens []seen
	logs  map[int]*logical
	nth   map[string]int             // scope + "\x00" + key → executions so far
	byKey map[string]int             // scope + "\x00" + key → logical (the first of a shared key's)
	evs   map[string][]keyEvent      // scope + "\x00" + key → events
	lost  map[string][]time.Duration // scope + "\x00" + key → completions refused for a lost lease
	saved map[string][]time.Duration // scope + "\x00" + key → completions stored
	// failed: scope + "\x00" + key → completions the store itself failed (slow or
	// unreachable: not an injected fault)
	failed map[string][]time.Duration
	bad    []violation // broken by a store call
	// killed is when each killed replica process (by incarnation) was reaped, dead
	// for sure; killSent, when its kill was sent. It died in between.
	killed, killSent map[int]time.Duration
	// lastLine is when each replica process (by incarnation) wrote its last line
	// that the history read.
	lastLine map[int]time.Duration
	restarts []storeRestart
	probeAt  time.Duration  // when the final probe began
	faults   map[string]int // faults injected by the test's process, by kind
}

func newHistory() *history {
	return &history{start: time.Now(), execs: map[int64]*execution{}, logs: map[int]*logical{},
		byKey: map[string]int{}, nth: map[string]int{}, lost: map[string][]time.Duration{}, evs: map[string][]keyEvent{},
		saved: map[string][]time.Duration{}, failed: map[string][]time.Duration{}, killed: map[int]time.Duration{}, killSent: map[int]time.Duration{}, lastLine: map[int]time.Duration{}, faults: map[string]int{}}
}

// killedWithin reports whether the replica process of incarnation inc may have died
// between from and to: it died after its kill was sent and before it was reaped,
// which on a loaded machine may be much later.
func (h *history) killedWithin(inc int, from, to time.Duration) bool {
	reaped, ok := h.killed[inc]
	return ok && inc != 0 && reaped >= from && h.killSent[inc] <= to
}

// processOf says, for the report of an execution p of a replica process, when that
// process was killed and when it last wrote, against p's end and its lease's: a
// completion never made within the lease by a process that lived on past it (a
// stall, or a completion never called) reads differently from one cut short by a
// kill. Empty for an execution of the test's own process. h.mu is held (check).
func (h *history) processOf(p *execution) string {
	if p.Inc == 0 {
		return ""
	}
	killed := "not killed"
	if k, ok := h.killed[p.Inc]; ok {
		killed = fmt.Sprintf("sent its kill at %v, reaped at %v", h.killSent[p.Inc], k)
	}
	return fmt.Sprintf(" at %v (lease until %v); its process, incarnation %d, %s, its last line at %v",
		p.End, p.LeaseEnd, p.Inc, killed, h.lastLine[p.Inc])
}

func sk(scope, key string) string { return scope + "\x00" + key }

func (h *history) since() time.Duration { return time.Since(h.start) }

// event notes what happened to a key, for the report of a failing key.
func (h *history) event(scope, key, format string, args ...any) {
	h.eventAt(h.since(), scope, key, fmt.Sprintf(format, args...))
}

// eventAt notes a key's event at a given time (a replica process's).
func (h *history) eventAt(at time.Duration, scope, key, line string) {
	if key == "" {
		return
	}
	h.mu.Lock()
	h.evs[sk(scope, key)] = append(h.evs[sk(scope, key)], keyEvent{at, line})
	h.mu.Unlock()
}

// count counts an injected fault.
func (h *history) count(kind string) {
	h.mu.Lock()
	h.faults[kind]++
	h.mu.Unlock()
}

func (h *history) addLogical(l *logical) {
	h.mu.Lock()
	h.logs[l.ID] = l
	h.mu.Unlock()
}

// setKey binds a logical request to its key (the stack generates one on the first
// attempt).
func (h *history) setKey(id int, key string) {
	h.mu.Lock()
	l := h.logs[id]
	first := l.Key == ""
	if first {
		l.Key = key
		if _, ok := h.byKey[sk(l.Scope, key)]; !ok {
			h.byKey[sk(l.Scope, key)] = id
		}
	}
	h.mu.Unlock()
	if first {
		h.event(l.Scope, key, "logical #%d %s via %s client: plan %+v", id, wireOf(seen{Proto: l.Proto, Wire: l.Wire}), l.Client, l.Plan)
	}
}

func (h *history) beginExec(ctx context.Context, scope, key, proto, replica string) *execution {
	d, ok := ctx.Deadline()
	if !ok {
		d = time.Now().Add(deadline.DefaultBudget)
	}
	h.mu.Lock()
	h.nexec++
	e := &execution{ID: h.nexec, Scope: scope, Key: key, Proto: proto, Replica: replica, Start: h.since(), Nth: h.nth[sk(scope, key)],
		LeaseEnd: d.Sub(h.start) + leaseMargin}
	h.nth[sk(scope, key)]++
	h.execs[e.ID] = e
	h.mu.Unlock()
	h.event(scope, key, "exec %d begins on %s", e.ID, replica)
	return e
}

// endExec records the execution's answer and whether it was released.
func (h *history) endExec(e *execution, a answer, released string) {
	h.mu.Lock()
	e.End, e.Ans, e.Released, e.ended = h.since(), a, released, true
	h.mu.Unlock()
	what := "completed"
	if released != "" {
		what = "released (" + released + ")"
	}
	h.event(e.Scope, e.Key, "exec %d %s: %v", e.ID, what, a)
}

// leaseLost notes a completion the store refused because the lease had ended.
func (h *history) leaseLost(scope, key string) {
	h.mu.Lock()
	h.lost[sk(scope, key)] = append(h.lost[sk(scope, key)], h.since())
	h.mu.Unlock()
}

// stored notes a completion the store took.
func (h *history) stored(scope, key string) {
	h.mu.Lock()
	h.saved[sk(scope, key)] = append(h.saved[sk(scope, key)], h.since())
	h.mu.Unlock()
}

// storeFailed notes a completion the store failed, at the time it began: the answer
// was not stored if the call was made within the lease, however late it failed (a
// Redis slow after an outage fails it at the store's timeout, which may be past the
// lease's end).
func (h *history) storeFailed(scope, key string, began time.Time) {
	h.mu.Lock()
	h.failed[sk(scope, key)] = append(h.failed[sk(scope, key)], began.Sub(h.start))
	h.mu.Unlock()
}

// violated notes an invariant a store call broke.
func (h *history) violated(v violation) {
	h.mu.Lock()
	h.bad = append(h.bad, v)
	h.mu.Unlock()
}

// overran reports whether e completed after its lease ended, as its store said: the
// handler ran past its deadline plus the margin (a process paused, a loaded
// machine), and deduplication does not promise to keep its answer. A lease lost
// before its end breaks an invariant.
func (h *history) overran(e *execution, es []*execution, bad func(inv, scope, key, format string, args ...any)) bool {
	for _, t := range h.lost[sk(e.Scope, e.Key)] {
		if t < e.End {
			continue
		}
		if h.storedIn(e, t, es) {
			// e's answer was stored first: the completion that found its lease
			// lost is another's (an earlier execution's, whose lease went with the
			// store's records, tried again late) or a retry of e's own.
			return false
		}
		if h.recordLost(e.Start, t) {
			return true // the store lost the lease with its records
		}
		if h.restartedIn(e.End, t) {
			// A completion tried again after the store restarted: its first try
			// may have landed before the restart (then the record is done, and
			// the retry finds no lease of its token); which, the key's later
			// executions and replays tell.
			return false
		}
		if t < e.LeaseEnd-25*time.Millisecond {
			bad("a lease holds until its deadline + margin", e.Scope, e.Key, "exec %d's completion at %v found its lease lost, before its end at %v", e.ID, t, e.LeaseEnd)
		}
		return true
	}
	return false
}

// storedIn reports whether a completion that may be e's was stored between e's end
// and t: one stored after another execution of the key (of es) ended is that
// one's, or may be (seen under -race: a store delay held e's completion past its
// lease, the key ran again, and its completion was stored before e's was refused).
func (h *history) storedIn(e *execution, t time.Duration, es []*execution) bool {
	for _, at := range h.saved[sk(e.Scope, e.Key)] {
		if at < e.End || at > t {
			continue
		}
		another := false
		for _, x := range es {
			if x != e && x.End >= e.End && x.End <= at {
				another = true
				break
			}
		}
		if !another {
			return true
		}
	}
	return false
}

func (h *history) saw(s seen) {
	s.At = h.since()
	h.mu.Lock()
	h.seens = append(h.seens, s)
	h.mu.Unlock()
	if s.Err != "" {
		h.event(s.Scope, s.Key, "logical #%d %s (%s) saw error: %s", s.Logical, s.Via, wireOf(s), s.Err)
		return
	}
	h.event(s.Scope, s.Key, "logical #%d %s (%s) saw replayed=%v truncated=%v exec=%d: %v", s.Logical, s.Via, wireOf(s), s.Replayed, s.Truncated, s.ExecID, s.Ans)
}

// invHTTPTrailers is the invariant that a replayed HTTP answer carries the
// execution's trailers (part of "a replay is byte-equal"), named apart because the
// code checked today breaks it (see known).
const invHTTPTrailers = "a replay carries the execution's trailers (HTTP)"

// invCutShort is part of "a replay is byte-equal": the stored body is the whole
// body the handler wrote, not the part the first caller's connection took.
const invCutShort = "a replay is the execution's whole answer, not the part its first caller received"

// invConnectStopMeta is part of "an answer is byte-equal to its execution's": the
// error a connect client's stack returns when its retry layer stopped (a
// retry.StopError) carries the last attempt's metadata, the handler's header and
// trailer (and dedup's replay marker), as the gRPC stack leaves them in the
// caller's grpc.Header and grpc.Trailer. Named apart because the code checked today
// breaks it (see known).
const invConnectStopMeta = "the connect stack's stopped failure carries the answer's header and trailer"

// invStatusAsError is DESIGN.md's rule that an http.RoundTripper returns the
// server's response for every status it received.
const invStatusAsError = "the HTTP stack returns every answer it received as a response"

// violation is a broken invariant, on one key.
type violation struct {
	Invariant  string
	Scope, Key string
	Detail     string
}

// check returns the violations of the history's invariants. maxResponse is the
// server's WithMaxResponseSize: a larger answer is completed but not kept.
func (h *history) check(maxResponse int) []violation {
	h.mu.Lock()
	defer h.mu.Unlock()
	var vs []violation
	bad := func(inv, scope, key, format string, args ...any) {
		vs = append(vs, violation{inv, scope, key, fmt.Sprintf(format, args...)})
	}
	perKey := map[string][]*execution{}
	for _, e := range h.execs {
		perKey[sk(e.Scope, e.Key)] = append(perKey[sk(e.Scope, e.Key)], e)
		if !e.ended && !e.Killed {
			bad("every execution ends", e.Scope, e.Key, "exec %d never returned", e.ID)
		}
	}
	completed := map[string][]*execution{}
	for k, es := range perKey {
		completed[k] = h.checkKey(es, bad)
	}
	for _, s := range h.seens {
		if s.StatusAsError != 0 {
			bad(invStatusAsError, s.Scope, s.Key, "logical #%d got the error %q for an answer with status %d", s.Logical, s.Err, s.StatusAsError)
		}
		if s.Err != "" {
			continue
		}
		h.checkSeen(s, completed[sk(s.Scope, s.Key)], maxResponse, bad)
	}
	return vs
}

// killSlack is how far a key's execution may begin before its killed predecessor's
// lease end as the history computes it (the request's deadline plus the margin): the
// store's lease was computed a moment before, and ends a little earlier.
const killSlack = 5 * time.Millisecond

// checkKey checks the executions of one key against each other, and returns those
// that completed: more than one only when the store lost the records between them.
func (h *history) checkKey(es []*execution, bad func(inv, scope, key, format string, args ...any)) []*execution {
	sort.Slice(es, func(i, j int) bool { return es[i].Start < es[j].Start })
	var completed []*execution
	for i, e := range es {
		for _, p := range es[:i] {
			if h.recordLost(p.Start, e.Start) {
				continue // p's lease or answer went with the store's records
			}
			switch {
			case p.Killed:
				if e.Start < p.LeaseEnd-killSlack {
					bad(invKilledLease, e.Scope, e.Key, "exec %d began at %v; exec %d was killed at %v, its lease held until %v", e.ID, e.Start, p.ID, p.End, p.LeaseEnd)
				}
			case e.Start < p.End:
				bad("executions of a key never overlap", e.Scope, e.Key, "exec %d began at %v, while exec %d ran (until %v)", e.ID, e.Start, p.ID, p.End)
			case p.Released == "" && h.neverStored(p, e):
				p.Released = "its answer was never stored (its process killed, or the store down)"
			case p.Released == "":
				bad("at most one execution per key, none after a completed one", e.Scope, e.Key, "exec %d ran after exec %d completed%s", e.ID, p.ID, h.processOf(p))
			}
		}
		if e.Released == "" && !e.Killed && h.overran(e, es, bad) {
			e.Released = "lease ended before its completion"
		}
	}
	for _, e := range es {
		if e.Released == "" && !e.Killed {
			completed = append(completed, e)
		}
	}
	return completed
}

// invKilledLease: a killed execution's key runs again only once its lease ended.
const invKilledLease = "a killed execution's key runs again only once its lease ended"

// recordLost reports whether a store restart without persistence overlapped the
// time from (an execution's start: its lease was taken a little before) to to. The
// restart counts until the store is back: the process being stopped may still grant
// a lease after the restart began, and the new one starts without it (seen under
// -race on a loaded machine: a lease granted 21 ms into a restart, its handler
// begun 780 ms later).
func (h *history) recordLost(from, to time.Duration) bool {
	const acquired = 500 * time.Millisecond // a lease is taken before its handler begins (long under -race)
	for _, r := range h.restarts {
		if r.Lossy && r.Back > from-acquired && r.Stop < to {
			return true
		}
	}
	return false
}

// restartedIn reports whether the store restarted between from and to.
func (h *history) restartedIn(from, to time.Duration) bool {
	for _, r := range h.restarts {
		if r.Back >= from && r.Stop <= to {
			return true
		}
	}
	return false
}

// neverStored reports whether p, which completed, may legitimately be followed by
// e: its answer was never stored (no completion of its key was taken between its end
// and e's start) because its process was killed or the store was down (restarted,
// or failing the completion itself: a Redis too slow to answer within the store's
// timeout) before the answer could be, and e began once p's lease had ended.
func (h *history) neverStored(p, e *execution) bool {
	for _, t := range h.saved[sk(p.Scope, p.Key)] {
		if t >= p.End && t <= e.Start {
			return false
		}
	}
	if e.Start < p.LeaseEnd-killSlack {
		return false
	}
	if h.killedWithin(p.Inc, p.End, p.LeaseEnd) {
		return true
	}
	for _, r := range h.restarts {
		if r.Stop <= p.LeaseEnd && r.Back >= p.End {
			return true
		}
	}
	for _, t := range h.failed[sk(p.Scope, p.Key)] {
		if t >= p.End && t <= p.LeaseEnd {
			return true
		}
	}
	return false
}

// checkSeen checks one answer a client saw.
func (h *history) checkSeen(s seen, completed []*execution, maxResponse int, bad func(inv, scope, key, format string, args ...any)) {
	var c *execution // the last completion
	big := false     // some completion's answer was above the limit
	for _, e := range completed {
		c = e
		big = big || len(e.Ans.Body) > maxResponse
	}
	if s.notKept() && s.Replayed {
		bad("only the stored answer is marked replayed", s.Scope, s.Key, "logical #%d saw the not-kept refusal marked replayed: %v", s.Logical, s.Ans)
	}
	// A probe answered by a new execution (one the store's lost records or a lease
	// ended unstored allowed) is judged with the key's executions, in checkKey; after
	// the store lost the key's records, a probe may meet anything a first request may.
	fresh := s.ExecID != 0 && h.execs[s.ExecID] != nil && h.execs[s.ExecID].Start >= h.probeAt
	if s.Via == "probe" && !s.Replayed && !s.notKept() && !fresh && c != nil && !h.recordLost(c.Start, h.probeAt) {
		bad("a completed key's answer is kept and replayed", s.Scope, s.Key, "the final probe saw %v (exec %d), not a replay", s.Ans, s.ExecID)
	}
	if s.ExecID == 0 {
		ok := (s.Proto == "http" && s.Ans.Status/100 == 2) || (s.Proto != "http" && s.Ans.Status == 0)
		switch {
		case s.notKept():
			if !big {
				bad("a not-kept replay follows a completed answer above the limit", s.Scope, s.Key, "logical #%d saw %v; completed: %v", s.Logical, s.Ans, c)
			}
		case s.Replayed:
			bad("a replay is an execution's answer", s.Scope, s.Key, "logical #%d saw a replay naming no execution: %v", s.Logical, s.Ans)
		case ok:
			bad("every 2xx corresponds to an execution", s.Scope, s.Key, "logical #%d saw %v", s.Logical, s.Ans)
		}
		return
	}
	e := h.execs[s.ExecID]
	switch {
	case e == nil:
		bad("every answer names an execution", s.Scope, s.Key, "logical #%d saw exec %d, which never ran", s.Logical, s.ExecID)
		return
	case e.Scope != s.Scope || e.Key != s.Key:
		bad("no answer crosses a scope or a key", s.Scope, s.Key, "logical #%d (scope %q key %q, %s) saw the answer of exec %d (scope %q key %q)", s.Logical, s.Scope, s.Key, wireOf(s), e.ID, e.Scope, e.Key)
		return
	}
	if s.Replayed {
		if !slices.Contains(completed, e) {
			bad("a replay is the completed execution's answer", s.Scope, s.Key, "logical #%d saw a replay of exec %d (released %q)", s.Logical, e.ID, e.Released)
			return
		}
		if len(s.Ans.Body) > maxResponse {
			bad("an answer above the limit is not replayed", s.Scope, s.Key, "logical #%d saw a replay of %d bytes", s.Logical, len(s.Ans.Body))
		}
	}
	got, want := s.Ans, e.Ans
	if s.Annotated {
		got.Status = want.Status
	}
	if s.Truncated {
		if !bytes.HasPrefix(want.Body, got.Body) {
			bad("a body read in part is a prefix of the execution's", s.Scope, s.Key, "logical #%d: %s", s.Logical, want.diff(got))
		}
		got.Body, got.Trailer = want.Body, want.Trailer
	}
	if s.Annotated && s.Proto == "connect" && len(got.Header)+len(got.Trailer) == 0 && len(want.Header)+len(want.Trailer) > 0 {
		bad(invConnectStopMeta, s.Scope, s.Key, "logical #%d (via %s, %s) saw exec %d's failure without its header %v and trailer %v",
			s.Logical, s.Via, wireOf(s), e.ID, want.Header, want.Trailer)
		got.Header, got.Trailer = want.Header, want.Trailer // the rest is checked on
	}
	if s.Replayed && s.Proto == "http" && len(got.Trailer) == 0 && len(want.Trailer) > 0 {
		bad(invHTTPTrailers, s.Scope, s.Key, "logical #%d saw a replay of exec %d without its trailers %v", s.Logical, e.ID, want.Trailer)
		got.Trailer = want.Trailer // the rest is checked on
	}
	if s.Replayed && len(got.Body) < len(want.Body) && bytes.HasPrefix(want.Body, got.Body) {
		bad(invCutShort, s.Scope, s.Key, "logical #%d saw a replay of exec %d with %d bytes of its %d-byte body", s.Logical, e.ID, len(got.Body), len(want.Body))
		got.Body = want.Body // the rest is checked on
	}
	if d := want.diff(got); d != "" {
		inv := "an answer is byte-equal to its execution's"
		if s.Replayed {
			inv = "a replay is byte-equal to the execution's answer"
		}
		if len(got.Body) > len(want.Body) && bytes.HasPrefix(got.Body, want.Body) {
			d += fmt.Sprintf(" (it ends with %q)", got.Body[len(want.Body):])
		}
		bad(inv, s.Scope, s.Key, "logical #%d (replayed=%v, via %s, %s) of exec %d: %s", s.Logical, s.Replayed, s.Via, wireOf(s), e.ID, d)
	}
}

// report is the compact history of a violation's key.
func (h *history) report(v violation) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "VIOLATION %q on scope %q key %q: %s\n", v.Invariant, v.Scope, v.Key, v.Detail)
	evs := slices.Clone(h.evs[sk(v.Scope, v.Key)])
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].At < evs[j].At })
	const most = 60
	if len(evs) > most {
		fmt.Fprintf(&b, "  (%d events; the first %d)\n", len(evs), most)
		evs = evs[:most]
	}
	for _, e := range evs {
		fmt.Fprintf(&b, "  %9.3fms %s\n", float64(e.At.Microseconds())/1000, e.Line)
	}
	return b.String()
}

// summary is the run's figures: logical requests, faults injected by kind,
// executions by outcome, answers seen and replays among them, violations.
func (h *history) summary(violations int) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var completed, released, killed int
	for _, e := range h.execs {
		switch {
		case e.Killed:
			killed++
		case e.Released != "":
			released++
		default:
			completed++
		}
	}
	var answers, replays, errs int
	for _, s := range h.seens {
		switch {
		case s.Err != "":
			errs++
		case s.Replayed:
			replays++
			answers++
		default:
			answers++
		}
	}
	kinds := slices.Sorted(maps.Keys(h.faults))
	var b strings.Builder
	fmt.Fprintf(&b, "%d logical requests; %d calls seen: %d answers (%d replays), %d errors; "+
		"%d executions: %d completed, %d released, %d killed; %d violations\nfaults:",
		len(h.logs), len(h.seens), answers, replays, errs, len(h.execs), completed, released, killed, violations)
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s %d;", k, h.faults[k])
	}
	b.WriteString(h.byProtocol())
	for _, r := range h.restarts {
		fmt.Fprintf(&b, "\nstore down from %v to %v (records lost: %v)", r.Stop, r.Back, r.Lossy)
	}
	return b.String()
}

// byProtocol is the summary's figures per protocol (connect's by its wire):
// logical requests, and calls seen with the replays and errors among them; then the
// executions per server. h.mu is held.
func (h *history) byProtocol() string {
	type figures struct{ logical, calls, replays, errs int }
	per := map[string]*figures{}
	of := func(p string) *figures {
		if per[p] == nil {
			per[p] = &figures{}
		}
		return per[p]
	}
	for _, l := range h.logs {
		of(wireOf(seen{Proto: l.Proto, Wire: l.Wire})).logical++
	}
	for _, s := range h.seens {
		f := of(wireOf(s))
		f.calls++
		switch {
		case s.Err != "":
			f.errs++
		case s.Replayed:
			f.replays++
		}
	}
	execs := map[string]int{}
	for _, e := range h.execs {
		execs[e.Proto]++
	}
	var b strings.Builder
	b.WriteString("\nby protocol (logical requests; calls seen, replays and errors among them):")
	for _, p := range slices.Sorted(maps.Keys(per)) {
		f := per[p]
		fmt.Fprintf(&b, " %s %d; %d calls, %d replays, %d errors.", p, f.logical, f.calls, f.replays, f.errs)
	}
	b.WriteString("\nexecutions by server:")
	for _, p := range slices.Sorted(maps.Keys(execs)) {
		fmt.Fprintf(&b, " %s %d;", p, execs[p])
	}
	return b.String()
}
