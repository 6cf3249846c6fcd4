package exactlyonce_test

import (
	"bytes"
	"fmt"
	"github.com/deadlinekit/deadlinekit/deadline"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deadlinekit/deadlinekit/dedup/redisstore"
	"github.com/deadlinekit/deadlinekit/internal/redistest"
)

// proc is one replica process (one incarnation of a replica).
type proc struct {
	inc, replica int
	log          string
	cmd          *exec.Cmd
	out          bytes.Buffer // its output, read once it exited
	done         chan struct{}
	err          error
}

// replicaProcs runs the replicas as processes of this test binary
// (runReplica) on listeners it keeps open, and kills and restarts them.
type replicaProcs struct {
	t     testing.TB
	h     *history
	dir   string
	env   []string
	files [][]*os.File // per replica: its listeners, as fdHTTP, fdGRPC, fdConnect
	hosts []string     // per replica: HTTP, gRPC and connect addresses
	addrs []string
	conns []string

	mu  sync.Mutex
	cur []*proc // per replica: the running process
	all []*proc
}

// startReplicas opens the replicas' listeners and starts one process each.
func startReplicas(t testing.TB, h *history, redisAddr string, seed uint64, rate float64) *replicaProcs {
	p := &replicaProcs{t: t, h: h, dir: t.TempDir(), cur: make([]*proc, replicas),
		env: []string{envRedis + "=" + redisAddr, envSeed + "=" + strconv.FormatUint(seed, 10), envRate + "=" + strconv.FormatFloat(rate, 'g', -1, 64)}}
	for range replicas {
		var fs []*os.File
		for k := range 3 {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			f, err := l.(*net.TCPListener).File()
			l.Close() // f keeps the socket open
			if err != nil {
				t.Fatal(err)
			}
			fs = append(fs, f)
			addr := l.Addr().String()
			switch k {
			case 0:
				p.hosts = append(p.hosts, addr)
			case 1:
				p.addrs = append(p.addrs, addr)
			default:
				p.conns = append(p.conns, addr)
			}
		}
		p.files = append(p.files, fs)
	}
	t.Cleanup(func() {
		for _, fs := range p.files {
			for _, f := range fs {
				f.Close()
			}
		}
	})
	for i := range replicas {
		if err := p.start(i); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// start starts a new process of replica i.
func (p *replicaProcs) start(i int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr := &proc{inc: len(p.all) + 1, replica: i, done: make(chan struct{})}
	pr.log = filepath.Join(p.dir, fmt.Sprintf("replica-%d.%d.log", i, pr.inc))
	pr.cmd = exec.Command(os.Args[0])
	pr.cmd.Env = append(append(os.Environ(), p.env...), envReplica+"="+strconv.Itoa(i), envInc+"="+strconv.Itoa(pr.inc), envLog+"="+pr.log)
	pr.cmd.ExtraFiles = p.files[i]
	pr.cmd.Stdout, pr.cmd.Stderr = &pr.out, &pr.out
	pr.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test
	if err := pr.cmd.Start(); err != nil {
		return err
	}
	go func() { pr.err = pr.cmd.Wait(); close(pr.done) }()
	p.cur[i], p.all = pr, append(p.all, pr)
	return nil
}

// kill SIGKILLs replica i's process and notes when the kill was sent and when the
// process was reaped, dead for sure.
func (p *replicaProcs) kill(i int) {
	p.mu.Lock()
	pr := p.cur[i]
	p.mu.Unlock()
	sent := p.h.since()
	_ = pr.cmd.Process.Kill()
	<-pr.done
	at := p.h.since()
	p.h.mu.Lock()
	p.h.killSent[pr.inc], p.h.killed[pr.inc] = sent, at
	p.h.mu.Unlock()
	p.h.count("replica process killed")
}

// killer kills a replica at times drawn from the seed, and restarts it, until stop
// is closed. With requests always in flight, most kills land mid-request.
func (p *replicaProcs) killer(stop <-chan struct{}, seed uint64) {
	for n := 0; ; n++ {
		rng := rngFor(seed, "kill", strconv.Itoa(n))
		t := time.NewTimer(time.Duration(100+rng.IntN(600)) * time.Millisecond)
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C:
		}
		i := rng.IntN(replicas)
		p.kill(i)
		time.Sleep(time.Duration(rng.IntN(50)) * time.Millisecond)
		if err := p.start(i); err != nil {
			p.t.Errorf("restarting replica %d: %v", i, err)
			return
		}
	}
}

// restartStore kills and restarts the store at times drawn from the seed until
// stop is closed, and notes each restart in the history (lossy: without
// persistence, a restart loses every record).
func restartStore(t testing.TB, stop <-chan struct{}, seed uint64, srv *redistest.Server, lossy bool, h *history) {
	for n := 0; ; n++ {
		rng := rngFor(seed, "store restart", strconv.Itoa(n))
		tm := time.NewTimer(time.Duration(1500+rng.IntN(3000)) * time.Millisecond)
		select {
		case <-stop:
			tm.Stop()
			return
		case <-tm.C:
		}
		down := h.since()
		err := srv.RestartErr()
		back := h.since()
		h.mu.Lock()
		h.restarts = append(h.restarts, storeRestart{Stop: down, Back: back, Lossy: lossy})
		h.mu.Unlock()
		h.count(map[bool]string{true: "store restarted, records lost", false: "store restarted, records kept"}[lossy])
		if err != nil {
			t.Errorf("restarting the store: %v", err)
			return
		}
	}
}

// signal sends sig to every running process, once it is ready for it.
func (p *replicaProcs) signal(sig os.Signal) {
	p.mu.Lock()
	cur := append([]*proc(nil), p.cur...)
	p.mu.Unlock()
	for _, pr := range cur {
		waitLine(pr, `{"t":"ready"`)
		_ = pr.cmd.Process.Signal(sig)
	}
}

// waitLine waits, up to 10 s, until pr wrote a line beginning with prefix, or exited.
func waitLine(pr *proc, prefix string) {
	until := time.Now().Add(10 * time.Second)
	for time.Now().Before(until) {
		b, _ := os.ReadFile(pr.log)
		if bytes.Contains(b, []byte("\n"+prefix)) || bytes.HasPrefix(b, []byte(prefix)) {
			return
		}
		select {
		case <-pr.done:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// faultsOff turns the processes' store faults off, and waits until each says so.
func (p *replicaProcs) faultsOff() {
	p.signal(syscall.SIGUSR1)
	p.mu.Lock()
	cur := append([]*proc(nil), p.cur...)
	p.mu.Unlock()
	for _, pr := range cur {
		waitLine(pr, `{"t":"off"`)
	}
}

// stop stops every running process (SIGTERM; SIGKILL after 10 s), and fails t for a
// process that did not stop cleanly.
func (p *replicaProcs) stop() {
	p.signal(syscall.SIGTERM)
	p.mu.Lock()
	cur := append([]*proc(nil), p.cur...)
	p.mu.Unlock()
	for _, pr := range cur {
		select {
		case <-pr.done:
		case <-time.After(10 * time.Second):
			_ = pr.cmd.Process.Kill()
			<-pr.done
			p.t.Errorf("replica process %d (replica %d) did not stop within 10s of SIGTERM", pr.inc, pr.replica)
		}
		if pr.err != nil {
			p.t.Errorf("replica process %d (replica %d): %v\n%s", pr.inc, pr.replica, pr.err, pr.out.String())
		}
	}
}

// merge reads every process's log into the history.
func (p *replicaProcs) merge(final bool) {
	p.mu.Lock()
	all := append([]*proc(nil), p.all...)
	p.mu.Unlock()
	for _, pr := range all {
		if err := p.h.merge(pr.log, pr.inc, final); err != nil {
			p.t.Error(err)
		}
	}
}

// runProcessHistory runs n logical requests against replicas in their own
// processes sharing one real Redis (with persistence: an append-only file written
// on every command), killing and restarting the replicas and the store at times
// drawn from seed, and returns the violations.
func runProcessHistory(t *testing.T, seed uint64, n int, rate float64, persistent bool) ([]violation, *history) {
	srv := redisServer(t, persistent)
	h := newHistory()
	ps := startReplicas(t, h, srv.Addr, seed, rate)
	c := &cluster{h: h, hosts: ps.hosts, addrs: ps.addrs, conns: ps.conns}
	c.clients(t, seed, rate)
	t.Cleanup(c.close)
	r := &run{c: c, h: h, seed: seed}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { ps.killer(stop, seed) })
	wg.Go(func() { restartStore(t, stop, seed, srv, !persistent, h) })
	r.drive(n)
	close(stop)
	wg.Wait()
	ps.faultsOff()
	ps.merge(false)
	r.probe()
	c.close()
	ps.stop()
	ps.merge(true)
	vs := h.check(maxResponse)
	vs = append(vs, h.bad...)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	return append(vs, leftLeases(redisstore.New(rdb, redisstore.WithPrefix("eo:")), h.storeKeys(), h.killedLease)...), h
}

// redisServer starts redis-server for t, with an append-only file when persistent.
func redisServer(t *testing.T, persistent bool) *redistest.Server {
	if !persistent {
		return redistest.Start(t)
	}
	srv, err := redistest.RunPersistent(t.TempDir())
	if err != nil { // ErrNotInstalled too: a checker that skips checks nothing
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// storeKeys returns the store key of every key that was executed.
func (h *history) storeKeys() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[string]bool{}
	var keys []string
	for _, e := range h.execs {
		k := strconv.Itoa(len(e.Scope)) + ":" + e.Scope + ":" + e.Key
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// killedLease returns when the lease of the last execution of store key k killed
// with its process ends, or the zero time. An execution that completed counts too
// when its process was killed before its lease ended: its answer may never have
// reached the store (a completion that failed once is tried again in the
// background, which the kill ends), and its lease then holds to its end.
func (h *history) killedLease(k string) time.Time {
	scope, key := splitKey(k)
	h.mu.Lock()
	defer h.mu.Unlock()
	var end time.Duration
	for _, e := range h.execs {
		if e.Scope != scope || e.Key != key {
			continue
		}
		if e.Killed || h.killedWithin(e.Inc, e.End, e.LeaseEnd) {
			end = max(end, e.LeaseEnd)
		}
	}
	// A lease granted just before its process was killed, to a request whose
	// handler had not begun (so no execution names it), holds for the request's
	// budget: at most the default budget plus the margin past the last kill.
	for _, kill := range h.killed {
		end = max(end, kill+deadline.DefaultBudget+leaseMargin)
	}
	if end == 0 {
		return time.Time{}
	}
	return h.start.Add(end)
}
