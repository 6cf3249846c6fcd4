package payflow_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/deadlinekit/deadlinekit/internal/redistest"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		// A process of TestPayflow's chain, not a test run.
		if err := runRole(role); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", role, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

const (
	rate      = 150.0                   // payments per second
	shortRate = 50.0                    // under -short
	faultAt   = 1500 * time.Millisecond // after the client's start
	outageFor = 2 * time.Second         // Redis down or paused
)

// scenario is one run of the chain, on fresh processes and a fresh Redis.
type scenario struct {
	name    string
	seconds float64 // of arrivals
	drop    float64 // the share of answers the client's transport drops
	// fault injects the scenario's fault once the client's arrivals reach faultAt
	// (at waits until the payment due then was sent), and returns the outage it
	// caused (down == back for a moment's fault; zero for none).
	fault func(t *testing.T, c *chain, at func(time.Duration)) (down, back time.Time)
}

var scenarios = []scenario{
	{name: "answers-dropped", seconds: 3, drop: 0.1},
	{name: "replica-killed", seconds: 4, fault: killReplica},
	{name: "redis-killed", seconds: 5.5, fault: killRedis},
	{name: "redis-paused", seconds: 5.5, fault: pauseRedis},
}

// minAnswered is the share of payments that must be answered across the Redis
// outage (see TestPayflow).
const minAnswered = 0.95

// TestPayflow runs the payments chain of issue 36, each service in its own process:
// an open-loop client → a gateway (HTTP) → two payments replicas (gRPC, dedup on
// one Redis) → a ledger (HTTP, dedup in memory), under each scenario's fault, and
// checks what a payments team would: no payment charged twice, every answered
// payment charged, and across a 2 s Redis outage most of the payments answered
// within the client's retries ([minAnswered]).
func TestPayflow(t *testing.T) {
	r := rate
	if testing.Short() {
		r = shortRate
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			f := runScenario(t, sc, r)
			checkCharges(t, f)
			// The goal: 95% answered. Before redisstore kept go-redis's
			// pool from giving up on the killed Redis (it then refused every
			// call for up to a second after Redis was back), 90.7-97.0% were
			// answered; after, 100% in most runs on the loaded 2-core machine,
			// and below 95% in 2 of 24 there, each after Redis was back
			// (RELIABILITY.md). On a machine too loaded to answer every payment
			// even before the fault, the share is of what it answered then.
			// A run below it is run once more, and the test fails when both are:
			// what one loaded run misses is noted, a second miss is the product's.
			// Under -race the share is the race detector's figure (raceEnabled).
			if sc.name != "redis-killed" || raceEnabled || answeredEnough(f) {
				return
			}
			t.Logf("%s; run again", shortOf(f))
			g := runScenario(t, sc, r)
			checkCharges(t, g)
			if !answeredEnough(g) {
				t.Errorf("twice below the share answered across a %v Redis outage: %s; then %s", outageFor, shortOf(f), shortOf(g))
			}
		})
	}
}

// checkCharges logs a scenario's figures and checks its charges: none twice, every
// answered payment charged.
func checkCharges(t *testing.T, f figures) {
	t.Helper()
	t.Log(f.String())
	if f.twice > 0 {
		t.Errorf("%d of %d payments charged twice: %s", f.twice, f.sent, strings.Join(f.twiceIDs[:min(len(f.twiceIDs), 10)], ", "))
	}
	if len(f.uncharged) > 0 {
		t.Errorf("%d answered payments were never charged: %s", len(f.uncharged), strings.Join(f.uncharged[:min(len(f.uncharged), 10)], ", "))
	}
}

// answeredEnough reports whether f answered at least [minAnswered] of its payments,
// of the share it answered before the fault.
func answeredEnough(f figures) bool {
	return float64(f.answered) >= minAnswered*f.baseline()*float64(f.sent)
}

// shortOf says how many of f's payments were answered, against the share wanted.
func shortOf(f figures) string {
	return fmt.Sprintf("%d of %d payments answered (%.1f%%), want at least %.1f%% (%.0f%% of the %d of %d answered of those sent more than %v before it)",
		f.answered, f.sent, 100*float64(f.answered)/float64(f.sent), 100*minAnswered*f.baseline(), 100*minAnswered, f.baseAnswered, f.baseSent, baseMargin)
}

// figures are a scenario's readings.
type figures struct {
	name                     string
	sent, answered           int
	charged, twice           int
	twiceIDs, uncharged      []string
	attempts, dropped        int
	refusals                 map[string]int // by status, or the client's error
	resendRefusals           map[string]int // of the resends, likewise
	baseSent, baseAnswered   int            // payments sent more than baseMargin before the fault, and answered
	outage                   bool
	down, back               time.Time
	refusedBefore            int           // refusals that came before the outage
	refusedDuring            int           // refusals that came while Redis was down or paused
	refusedAfter             int           // refusals that came after it
	lastAfter                time.Duration // the last refusal after the outage, after its end
	sentDuring, sentAfter    int           // refusals of payments sent during the outage, after it
	lastSentAfter            time.Duration // the last refused payment sent after the outage, after its end
	p50, p99                 time.Duration // of the answered payments, arrival to answer
	faultNote                string
	resent, answeredOnResend int // payments the client sent again (same key, fresh budget), and answered so
	ledgerRepeats            int // requests to charge that repeated a key, met by the ledger's dedup
}

// baseMargin: a payment sent this long before the fault is of the baseline, its
// answer (tens of milliseconds on a quiet machine) long in before the fault.
const baseMargin = 500 * time.Millisecond

// baseline is the share of the payments sent more than baseMargin before the fault
// that were answered (1 without a fault).
func (f figures) baseline() float64 {
	if f.baseSent == 0 {
		return 1
	}
	return float64(f.baseAnswered) / float64(f.baseSent)
}

func (f figures) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d sent, %d answered (%.1f%%), %d charged, %d charged twice; %d attempts, %d answers dropped, %d repeated charges met the ledger's dedup; answered p50 %v, p99 %v",
		f.name, f.sent, f.answered, 100*float64(f.answered)/float64(max(f.sent, 1)), f.charged, f.twice, f.attempts, f.dropped, f.ledgerRepeats,
		f.p50.Round(time.Millisecond), f.p99.Round(time.Millisecond))
	if f.resent > 0 {
		fmt.Fprintf(&b, "; resent %d unanswered with the same key once their lease had ended, %d answered then", f.resent, f.answeredOnResend)
	}
	if f.faultNote != "" {
		fmt.Fprintf(&b, "; %s (before it: %d of %d answered)", f.faultNote, f.baseAnswered, f.baseSent)
	}
	if f.outage {
		fmt.Fprintf(&b, "; outage %v; refused: %d before the outage, %d during, %d after", f.back.Sub(f.down).Round(time.Millisecond),
			f.refusedBefore, f.refusedDuring, f.refusedAfter)
		if f.refusedAfter > 0 {
			fmt.Fprintf(&b, ", the last %v after", f.lastAfter.Round(time.Millisecond))
		}
		fmt.Fprintf(&b, "; by arrival: %d refused of those sent during the outage, %d of those sent after", f.sentDuring, f.sentAfter)
		if f.sentAfter > 0 {
			fmt.Fprintf(&b, ", the last sent %v after", f.lastSentAfter.Round(time.Millisecond))
		}
	}
	for _, m := range []struct {
		what string
		n    map[string]int
	}{{"refusals", f.refusals}, {"refusals of the resends", f.resendRefusals}} {
		if len(m.n) == 0 {
			continue
		}
		var ks []string
		for _, k := range slices.Sorted(maps.Keys(m.n)) {
			ks = append(ks, fmt.Sprintf("%s ×%d", k, m.n[k]))
		}
		fmt.Fprintf(&b, "; %s: %s", m.what, strings.Join(ks, ", "))
	}
	return b.String()
}

func runScenario(t *testing.T, sc scenario, rate float64) figures {
	rs := redistest.Start(t)
	c := &chain{t: t, dir: t.TempDir(), rs: rs}
	t.Cleanup(c.stopAll)
	lf, ledgerAddr := listen(t)
	p0, p0Addr := listen(t)
	p1, p1Addr := listen(t)
	gf, gatewayAddr := listen(t)
	ledgerURL, gatewayURL := "http://"+ledgerAddr, "http://"+gatewayAddr
	c.start("ledger", "ledger", lf)
	for i, f := range []*os.File{p0, p1} {
		c.start("payments-"+strconv.Itoa(i), "payments", f, envRedis+"="+rs.Addr, envLedger+"="+ledgerURL)
	}
	c.start("gateway", "gateway", gf, envReplicas+"="+p0Addr+","+p1Addr)
	c.waitHTTP(ledgerURL+"/charges", "ledger")
	c.waitHTTP(gatewayURL+"/pay", "gateway") // a GET: 405 once it serves

	n := int(rate * sc.seconds)
	out := filepath.Join(c.dir, "client.jsonl")
	client := c.start("client", "client", nil, envGateway+"="+gatewayURL, envRate+"="+strconv.FormatFloat(rate, 'g', -1, 64),
		envCount+"="+strconv.Itoa(n), envDrop+"="+strconv.FormatFloat(sc.drop, 'g', -1, 64),
		envSeed+"="+strconv.FormatInt(time.Now().UnixNano(), 10), envOut+"="+out, envPrefix+"="+sc.name)
	start := c.started(client)
	f := figures{name: sc.name, sent: n}
	faultDone := make(chan struct{})
	go func() {
		defer close(faultDone)
		if sc.fault != nil {
			f.down, f.back = sc.fault(t, c, func(d time.Duration) { client.sent(int(math.Ceil(d.Seconds() * rate))) })
			f.outage = f.back.After(f.down)
			if !f.down.IsZero() {
				f.faultNote = fmt.Sprintf("fault at +%v", f.down.Sub(start).Round(time.Millisecond))
			}
		}
	}()
	select {
	case <-client.done:
	case <-time.After(time.Duration(sc.seconds*float64(time.Second)) + budget + time.Minute):
		_ = client.cmd.Process.Kill()
		<-client.done
		t.Fatalf("the client did not end within a minute of its last payment's budget\n%s", client.output())
	}
	<-faultDone
	if client.err != nil {
		t.Fatalf("client: %v\n%s", client.err, client.output())
	}
	ledger := c.charges(ledgerURL + "/charges")
	c.stopAll()
	recs := readRecords(t, out)
	if len(recs) != n {
		t.Fatalf("the client recorded %d payments of %d", len(recs), n)
	}
	f.count(recs, ledger.Charges)
	f.ledgerRepeats = ledger.Repeats
	return f
}

// count reads the client's records and the ledger's charges into f.
func (f *figures) count(recs []record, charges map[string]int) {
	f.refusals, f.resendRefusals = map[string]int{}, map[string]int{}
	var lat []time.Duration
	for _, r := range recs {
		f.attempts += r.Attempts
		f.dropped += r.Dropped
		if r.Resend != nil {
			f.resent++
			if r.Resend.answered() {
				f.answeredOnResend++
			} else {
				f.resendRefusals[refusal(*r.Resend)]++
			}
		}
		if (r.First.answered() || r.Resend != nil && r.Resend.answered()) && charges[r.ID] == 0 {
			f.uncharged = append(f.uncharged, r.ID)
		}
		o := r.First
		if !f.down.IsZero() && time.Unix(0, o.Sent).Before(f.down.Add(-baseMargin)) {
			f.baseSent++
			if o.answered() {
				f.baseAnswered++
			}
		}
		if o.answered() {
			f.answered++
			lat = append(lat, time.Duration(o.Done-o.Sent))
			continue
		}
		f.refusals[refusal(o)]++
		if f.outage {
			switch done := time.Unix(0, o.Done); {
			case done.Before(f.down):
				f.refusedBefore++
			case done.Before(f.back):
				f.refusedDuring++
			default:
				f.refusedAfter++
				f.lastAfter = max(f.lastAfter, done.Sub(f.back))
			}
			switch sent := time.Unix(0, o.Sent); {
			case sent.Before(f.down):
			case sent.Before(f.back):
				f.sentDuring++
			default:
				f.sentAfter++
				f.lastSentAfter = max(f.lastSentAfter, sent.Sub(f.back))
			}
		}
	}
	for id, k := range charges {
		if k > 0 {
			f.charged++
		}
		if k > 1 {
			f.twice++
			f.twiceIDs = append(f.twiceIDs, fmt.Sprintf("%s ×%d", id, k))
		}
	}
	slices.Sort(f.twiceIDs)
	slices.Sort(lat)
	if len(lat) > 0 {
		f.p50, f.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
}

// refusal names the way a payment ended without an answer, its figures blanked
// ("503 downstream unavailable, retry in N s"), so that like ends count together.
func refusal(r outcome) string {
	k := strconv.Itoa(r.Status) + " " + strings.TrimSpace(r.Body)
	if r.Status == 0 {
		k = r.Err
		if _, after, ok := strings.Cut(k, `": `); ok { // Post "http://…/pay": …
			k = after
		}
	}
	k = addrRE.ReplaceAllString(k, "gateway")
	return figuresRE.ReplaceAllString(k, "N")
}

var (
	addrRE    = regexp.MustCompile(`http://[0-9.]+:[0-9]+`)
	figuresRE = regexp.MustCompile(`-?[0-9]+(\.[0-9]+)? ?(µs|ms|s)\b`)
)

func killReplica(t *testing.T, c *chain, at func(time.Duration)) (time.Time, time.Time) {
	at(faultAt)
	c.kill("payments-0")
	now := time.Now()
	return now, now
}

func killRedis(t *testing.T, c *chain, at func(time.Duration)) (time.Time, time.Time) {
	rs := c.rs
	at(faultAt)
	rs.Stop()
	down := time.Now()
	at(faultAt + outageFor)
	if err := rs.RestartErr(); err != nil {
		t.Errorf("restarting Redis: %v", err)
	}
	return down, time.Now()
}

func pauseRedis(t *testing.T, c *chain, at func(time.Duration)) (time.Time, time.Time) {
	pid, err := redisPID(c.rs.Addr)
	if err != nil {
		t.Errorf("Redis's process id: %v", err)
		return time.Time{}, time.Time{}
	}
	at(faultAt)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Errorf("pausing Redis: %v", err)
		return time.Time{}, time.Time{}
	}
	down := time.Now()
	at(faultAt + outageFor)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Errorf("resuming Redis: %v", err)
	}
	return down, time.Now()
}

// redisPID asks the server at addr for its process id.
func redisPID(addr string) (int, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("no process_id in INFO server")
}

// chain is a scenario's processes.
type chain struct {
	t     *testing.T
	dir   string
	rs    *redistest.Server
	mu    sync.Mutex
	procs []*proc
}

// proc is one role's process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	mu     sync.Mutex
	wrote  sync.Cond // broadcast on each write to out, and when the process ends
	out    bytes.Buffer
	done   chan struct{}
	err    error
	killed bool
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wrote.Broadcast()
	return p.out.Write(b)
}

// sent returns once the client has written that it sent payment i (clientSent):
// a fault is timed by the client's own arrivals, however late a loaded machine
// runs them, or once the client has ended.
func (p *proc) sent(i int) {
	line := []byte(fmt.Sprintf(clientSent+"\n", i))
	p.mu.Lock()
	defer p.mu.Unlock()
	for !bytes.Contains(p.out.Bytes(), line) {
		select {
		case <-p.done:
			return
		default:
		}
		p.wrote.Wait()
	}
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// listen opens a loopback listener and returns it as a file for a child process.
func listen(t *testing.T) (*os.File, string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := l.(*net.TCPListener).File()
	l.Close() // f keeps the socket open
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, l.Addr().String()
}

// start runs this test binary as role, with listener l (none for the client).
func (c *chain) start(name, role string, l *os.File, env ...string) *proc {
	p := &proc{name: name, done: make(chan struct{})}
	p.wrote.L = &p.mu
	p.cmd = exec.Command(os.Args[0])
	p.cmd.Env = append(append(os.Environ(), envRole+"="+role), env...)
	if l != nil {
		p.cmd.ExtraFiles = []*os.File{l}
	}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test
	if err := p.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
		p.mu.Lock()
		p.wrote.Broadcast()
		p.mu.Unlock()
	}()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p
}

// kill SIGKILLs the process named.
func (c *chain) kill(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.name == name {
			p.killed = true
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// stopAll stops every process still running (SIGTERM; SIGKILL after 10 s) and fails
// the test for one that did not end cleanly.
func (c *chain) stopAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range c.procs {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			c.t.Errorf("%s did not stop within 10 s of SIGTERM", p.name)
		}
		if p.err != nil && !p.killed {
			c.t.Errorf("%s: %v\n%s", p.name, p.err, p.output())
		}
		p.killed = true // reported once
	}
}

// started waits until the client sends its first payment (its start takes a second
// or more on a loaded machine, under -race), and returns when it did.
func (c *chain) started(p *proc) time.Time {
	until := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.output(), clientStarted) {
		select {
		case <-p.done:
			c.t.Fatalf("the client ended before sending: %v\n%s", p.err, p.output())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(until) {
			c.t.Fatalf("the client did not start sending within 30 s\n%s", p.output())
		}
	}
	return time.Now()
}

// waitHTTP waits until url answers, for up to 30 s. The listener is the test's,
// open before the server's process starts: a request waits in its backlog until
// the server serves it, so one request is the wait, with no polling.
func (c *chain) waitHTTP(url, name string) {
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		c.t.Fatalf("%s does not answer: %v", name, err)
	}
	resp.Body.Close()
}

// charges asks the ledger how many times it charged each payment.
func (c *chain) charges(url string) ledgerState {
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		c.t.Fatalf("the ledger's charges: %v", err)
	}
	defer resp.Body.Close()
	var st ledgerState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		c.t.Fatalf("the ledger's charges: %v", err)
	}
	return st
}

func readRecords(t *testing.T, path string) []record {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []record
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return recs
}
