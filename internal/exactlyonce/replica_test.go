package exactlyonce_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deadlinekit/deadlinekit/dedup/redisstore"
)

// The environment of a replica process, set by its parent (see replicaProcs).
const (
	envReplica = "EXACTLYONCE_REPLICA" // the replica's number
	envInc     = "EXACTLYONCE_INC"     // the process's incarnation, unique in the run
	envLog     = "EXACTLYONCE_LOG"     // the file it records to
	envRedis   = "EXACTLYONCE_REDIS"   // the shared Redis's address
	envSeed    = "EXACTLYONCE_SEED"
	envRate    = "EXACTLYONCE_RATE"
)

// Listeners a replica process inherits from its parent, as file descriptors 3, 4
// and 5 (cmd.ExtraFiles): the parent keeps them open across the process's kills,
// so that a replica comes back on the same addresses and a connection made while
// it is down waits in the backlog for the next process.
const (
	fdHTTP = 3 + iota
	fdGRPC
	fdConnect
)

// runReplica is one replica in its own process: this test binary started again by
// TestHistory/processes with the environment above (TestMain runs it instead of the
// tests when envReplica is set). It serves HTTP, gRPC and connect on its inherited
// listeners with dedup on the shared Redis, and records each execution to its log
// file, one line per event, written as it happens (a line written before a SIGKILL
// is in the page cache, and the parent reads it). Once it has written "ready",
// SIGUSR1 turns its store faults off and SIGTERM stops it.
func runReplica(replica string) error {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGTERM)
	defer signal.Stop(sig)
	inc, _ := strconv.Atoi(os.Getenv(envInc))
	seed, _ := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	rate, _ := strconv.ParseFloat(os.Getenv(envRate), 64)
	f, err := os.OpenFile(os.Getenv(envLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(envRedis), ContextTimeoutEnabled: true})
	defer rdb.Close()
	rec := &fileRecorder{f: f, inc: inc, rdb: rdb}
	store := newFaultStore(redisstore.New(rdb, redisstore.WithPrefix("eo:")), rec, seed+uint64(inc), rate, leaseMargin)
	var ls [3]net.Listener
	for i, name := range []string{"http", "grpc", "connect"} {
		ls[i], err = net.FileListener(os.NewFile(uintptr(fdHTTP+i), name))
		if err != nil {
			return err
		}
	}
	stops := serveReplica(rec, store, replica, ls[0], ls[1])
	stops = append(stops, serveConnect(rec, store, replica, ls[2]))
	rec.write(logLine{T: "ready"}) // its signals are handled from here on
	for s := range sig {
		if s == syscall.SIGTERM {
			break
		}
		store.off.Store(true)
		rec.write(logLine{T: "off"})
	}
	for _, stop := range slices.Backward(stops) {
		stop()
	}
	return nil
}

// logLine is one event in a replica process's log.
type logLine struct {
	T       string  `json:"t"` // begin, end, ev, lost, stored, failed, bad, fault, ready, off
	At      int64   `json:"at"`
	ID      int64   `json:"id,omitempty"`
	Scope   string  `json:"s,omitempty"`
	Key     string  `json:"k,omitempty"`
	Proto   string  `json:"p,omitempty"`
	Replica string  `json:"r,omitempty"`
	Lease   int64   `json:"lease,omitempty"` // the request's deadline plus the margin
	Nth     int     `json:"nth,omitempty"`
	Ans     *answer `json:"ans,omitempty"`
	Rel     string  `json:"rel,omitempty"`
	Msg     string  `json:"msg,omitempty"`
}

// fileRecorder is a replica process's recorder: one line per event, each in one
// write to a file opened for appending.
type fileRecorder struct {
	f   *os.File
	inc int
	rdb *redis.Client
	mu  sync.Mutex
	n   int64
}

// write writes l, at the time it is written unless l.At says when it happened.
func (r *fileRecorder) write(l logLine) {
	if l.At == 0 {
		l.At = time.Now().UnixNano()
	}
	b, _ := json.Marshal(l)
	_, _ = r.f.Write(append(b, '\n'))
}

// beginExec numbers the execution in its incarnation, and counts the key's
// executions in the shared Redis, so that a plan's first-execution-only faults
// happen once per key across processes.
func (r *fileRecorder) beginExec(ctx context.Context, scope, key, proto, replica string) *execution {
	r.mu.Lock()
	r.n++
	id := int64(r.inc)*1_000_000 + r.n
	r.mu.Unlock()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	n, err := r.rdb.Incr(cctx, "eon:"+sk(scope, key)).Result()
	cancel()
	if err != nil {
		n = 2 // not known: not the first
	}
	d, ok := ctx.Deadline()
	if !ok {
		d = time.Now().Add(time.Hour)
	}
	e := &execution{ID: id, Scope: scope, Key: key, Proto: proto, Replica: replica, Nth: int(n - 1), Inc: r.inc}
	r.write(logLine{T: "begin", ID: id, Scope: scope, Key: key, Proto: proto, Replica: replica,
		Lease: d.Add(leaseMargin).UnixNano(), Nth: e.Nth})
	return e
}

func (r *fileRecorder) endExec(e *execution, a answer, released string) {
	r.write(logLine{T: "end", ID: e.ID, Ans: &a, Rel: released})
}

func (r *fileRecorder) event(scope, key, format string, args ...any) {
	if key == "" {
		return
	}
	r.write(logLine{T: "ev", Scope: scope, Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (r *fileRecorder) leaseLost(scope, key string) {
	r.write(logLine{T: "lost", Scope: scope, Key: key})
}
func (r *fileRecorder) stored(scope, key string) {
	r.write(logLine{T: "stored", Scope: scope, Key: key})
}
func (r *fileRecorder) storeFailed(scope, key string, began time.Time) {
	r.write(logLine{T: "failed", At: began.UnixNano(), Scope: scope, Key: key})
}
func (r *fileRecorder) count(kind string) { r.write(logLine{T: "fault", Msg: kind}) }
func (r *fileRecorder) violated(v violation) {
	r.write(logLine{T: "bad", Scope: v.Scope, Key: v.Key, Msg: v.Invariant + "\x00" + v.Detail})
}

// merge reads the log of incarnation inc into the history: its executions (again,
// replacing those of an earlier merge), and, when final, its events too. An
// execution that never ended in a killed incarnation was killed.
func (h *history) merge(path string, inc int, final bool) error {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	at := func(ns int64) time.Duration { return time.Unix(0, ns).Sub(h.start) }
	for line := range bytes.Lines(b) {
		var l logLine
		if json.Unmarshal(line, &l) != nil {
			continue // the last line of a killed process may be cut short
		}
		h.mergeLine(l, at(l.At), at(l.Lease), inc, final)
	}
	h.mu.Lock()
	k, killed := h.killed[inc]
	var ks []*execution
	for _, e := range h.execs {
		if e.Inc == inc && !e.ended && killed {
			e.Killed, e.End = true, k
			ks = append(ks, e)
		}
	}
	h.mu.Unlock()
	for _, e := range ks {
		if final {
			h.eventAt(k, e.Scope, e.Key, fmt.Sprintf("exec %d killed with its process (its lease holds until %v)", e.ID, e.LeaseEnd))
		}
	}
	return nil
}

func (h *history) mergeLine(l logLine, at, lease time.Duration, inc int, final bool) {
	h.mu.Lock()
	h.lastLine[inc] = max(h.lastLine[inc], at)
	switch l.T {
	case "begin":
		h.execs[l.ID] = &execution{ID: l.ID, Scope: l.Scope, Key: l.Key, Proto: l.Proto, Replica: l.Replica,
			Start: at, LeaseEnd: lease, Nth: l.Nth, Inc: inc}
		l.Msg = fmt.Sprintf("exec %d begins on %s (incarnation %d)", l.ID, l.Replica, inc)
	case "end":
		if e := h.execs[l.ID]; e != nil && l.Ans != nil {
			e.End, e.Ans, e.Released, e.ended = at, *l.Ans, l.Rel, true
			l.Scope, l.Key, l.Msg = e.Scope, e.Key, fmt.Sprintf("exec %d completed: %v", e.ID, *l.Ans)
			if l.Rel != "" {
				l.Msg = fmt.Sprintf("exec %d released (%s): %v", e.ID, l.Rel, *l.Ans)
			}
		}
	}
	if !final {
		h.mu.Unlock()
		return
	}
	switch l.T {
	case "lost":
		h.lost[sk(l.Scope, l.Key)] = append(h.lost[sk(l.Scope, l.Key)], at)
		l.Msg = "store: completion found its lease lost"
	case "stored":
		h.saved[sk(l.Scope, l.Key)] = append(h.saved[sk(l.Scope, l.Key)], at)
	case "failed":
		h.failed[sk(l.Scope, l.Key)] = append(h.failed[sk(l.Scope, l.Key)], at)
	case "fault":
		h.faults[l.Msg]++
	case "bad":
		inv, detail, _ := bytes.Cut([]byte(l.Msg), []byte{0})
		h.bad = append(h.bad, violation{string(inv), l.Scope, l.Key, string(detail)})
	}
	h.mu.Unlock()
	if l.Msg != "" && l.T != "fault" && l.T != "bad" {
		h.eventAt(at, l.Scope, l.Key, l.Msg)
	}
}
