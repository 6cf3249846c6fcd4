package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/internal/record"
	"github.com/deadlinekit/deadlinekit/otelattr"
)

// The circuit-breaker scenario: B calls C under a steady load, an open loop (a call
// starts every 10 ms, each with a 250 ms budget, whatever became of the ones before),
// and C goes down for 3 s: it accepts each request and does not answer it until the
// request's deadline (a hung process, a peer that still takes connections), then comes
// back. B's client is the one the README shows, deadlinekit.NewTransport: once
// without its breaker (deadlinekit.Without(deadlinekit.Breaker)), once with it, so
// that the breaker is the only difference. To keep the demo short the circuit's first
// sleep is 1 s (deadlinekit.WithBreaker(breaker.WithOpenFor(time.Second))) instead
// of the default 5 s ± 20%; a failed probe doubles it (± 20%).
//
// The readings come from the services: C counts the requests that arrive while it is
// down and notes when it went down and when it came back; B times each of its calls
// and tells a refusal (breaker.ErrOpen) from a failure. The circuit's state is read
// from the breaker B's client shares (deadlinekit.WithSharedBreaker), every 5 ms: a
// change shows up to 5 ms after it happened.
const (
	brInterval = 10 * time.Millisecond
	brBudget   = 250 * time.Millisecond
	brWarmup   = 500 * time.Millisecond // C up, before the outage
	brOutage   = 3 * time.Second
	brOpenFor  = time.Second
	brSettle   = 300 * time.Millisecond // load kept on once the last reading is in
	brMaxAfter = 6 * time.Second        // at most this long after C came back
	brPoll     = 5 * time.Millisecond
)

// brService is C: it answers at once while up; while down it takes each request and
// does not answer until the request's context ends. It records when it went down and
// when it came back, and counts the requests that arrived in between.
type brService struct {
	mu           sync.Mutex
	down         bool
	downAt, upAt time.Time
	whileDown    int
}

func (c *brService) setDown(down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = down
	if down {
		c.downAt = time.Now()
	} else {
		c.upAt = time.Now()
	}
}

func (c *brService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	down := c.down
	if down {
		c.whileDown++
	}
	c.mu.Unlock()
	if down {
		<-r.Context().Done()
		writeResult(w, r.Context().Err()) // 504 at the deadline B passed on
		return
	}
	io.WriteString(w, "ok\n")
}

// brCall is what B recorded of one call to C.
type brCall struct {
	start, end time.Time
	err        error
	open       *breaker.OpenError // the breaker's refusal: nothing was sent
	probe      bool               // B's spans say it went through as a probe (only when tracing)
}

func (c brCall) took() time.Duration { return c.end.Sub(c.start) }

// stateChange is a change of the circuit's state, when the metric showed it.
type stateChange struct {
	at time.Time
	to string // record.BreakerState
}

// brRun is one run: what C and B recorded, and the circuit's changes.
type brRun struct {
	withBreaker  bool
	start, end   time.Time // of B's load
	downAt, upAt time.Time // as C recorded them
	whileDown    int
	calls        []brCall // by start
	changes      []stateChange
}

func runBreaker(e *env) ([]reading, error) {
	var runs [2]brRun
	for i, with := range []bool{false, true} {
		r, err := runBreakerOnce(e, with)
		if err != nil {
			return nil, err
		}
		runs[i] = r
	}
	fmt.Fprintln(e.out)
	fmt.Fprintf(e.out, "circuit breaker: B calls C every %v (budget %v), C hangs for %s; first sleep %s "+
		"(breaker.WithOpenFor, to keep the demo short; default 5 s ± 20%%)\n",
		brInterval, brBudget, seconds(runs[0].upAt.Sub(runs[0].downAt)), seconds(brOpenFor))
	for _, r := range runs {
		r.timeline(e.out)
	}
	wo, wi := runs[0], runs[1]
	open := func(r brRun) string {
		if !r.withBreaker {
			return "no circuit"
		}
		at, ok := r.firstChange(string(record.BreakerOpen), r.downAt)
		if !ok {
			return "did not open"
		}
		return fmt.Sprintf("%s, %d calls failed", short(at.Sub(r.downAt)), r.failedBefore(at))
	}
	since := func(r brRun, at time.Time, ok bool) string {
		if !ok {
			return "not within " + seconds(brMaxAfter)
		}
		return short(at.Sub(r.upAt))
	}
	closed := func(r brRun) string {
		if !r.withBreaker {
			return "no circuit"
		}
		at, ok := r.firstChange(string(record.BreakerClosed), r.upAt)
		return since(r, at, ok)
	}
	success := func(r brRun) string { at, ok := r.firstSuccess(); return since(r, at, ok) }
	reached := func(r brRun) string { return fmt.Sprintf("%d (%d sent)", r.whileDown, len(r.during())) }
	fail := func(r brRun) string {
		d, n := r.failTime()
		s := short(d)
		if refused := r.refusedDuring(); refused > 0 {
			s += fmt.Sprintf(" (%d of %d refused)", refused, n)
		}
		return s
	}
	failedAfter := func(r brRun) string { return fmt.Sprint(r.failedAfter()) }
	return []reading{
		{"circuit breaker", "calls reaching C while it hung (" + seconds(wo.upAt.Sub(wo.downAt)) + ")", reached(wo), reached(wi)},
		{"", "B's time to fail a call while C hung (median)", fail(wo), fail(wi)},
		{"", "C down → circuit open", open(wo), open(wi)},
		{"", "C back → B's first success", success(wo), success(wi)},
		{"", "C back → circuit closed", closed(wo), closed(wi)},
		{"", "B's calls failed after C was back", failedAfter(wo), failedAfter(wi)},
	}, nil
}

func runBreakerOnce(e *env, withBreaker bool) (brRun, error) {
	c := &brService{}
	cURL, stop, err := serveHTTP(e.tel.serverHandler(svcC, deadlinekit.NewHandler(c)))
	if err != nil {
		return brRun{}, err
	}
	defer stop()

	// B's client, as the README wires one. The two runs differ only by the breaker,
	// which B shares with the demo, so that the demo can read its circuit.
	b := breaker.New(breaker.WithOpenFor(brOpenFor))
	opts := []deadlinekit.Option{deadlinekit.WithSharedBreaker(b)}
	variant := "with the breaker"
	if !withBreaker {
		opts = append(opts, deadlinekit.Without(deadlinekit.Breaker))
		variant = "without the breaker"
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 64 // a call hangs for its whole budget: ~25 at once
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: e.tel.transport(svcB, deadlinekit.NewTransport(base, opts...))}

	// B's telemetry says which calls were probes; the demo reads it to name and
	// print their traces.
	probes := &probeSpotter{traces: map[trace.TraceID]bool{}}
	defer e.tel.watch(svcB, probes)()

	var w *circuitWatch
	if withBreaker {
		w = watchCircuit(b, breaker.TargetName("http", strings.TrimPrefix(cURL, "http://")))
	}

	run := brRun{withBreaker: withBreaker}
	var mu sync.Mutex // guards run.calls
	var traced [4]sync.Once
	call := func(whileDown bool) {
		ctx, root := e.tel.provider(svcB).Tracer("threehop").Start(context.Background(), "circuit breaker, "+variant)
		ctx, cancel := context.WithTimeout(ctx, brBudget)
		rc := brCall{start: time.Now()}
		rc.err = httpGet(ctx, client, cURL)
		rc.end = time.Now()
		cancel()
		rc.open, _ = breaker.IsOpen(rc.err)
		rc.probe = probes.has(root.SpanContext().TraceID())
		root.SetName("circuit breaker, " + variant + ": " + rc.String())
		root.End()
		switch {
		case !withBreaker && whileDown && rc.err != nil:
			traced[0].Do(func() { e.trace("circuit breaker: without the breaker, a call while C hung", root) })
		case rc.open != nil && rc.open.State == breaker.Open && rc.took() < time.Millisecond:
			traced[1].Do(func() { e.trace("circuit breaker: a call refused, circuit open", root) })
		case rc.probe && rc.err != nil:
			traced[2].Do(func() { e.trace("circuit breaker: a probe while C still hung", root) })
		case rc.probe:
			traced[3].Do(func() { e.trace("circuit breaker: the probe that found C back", root) })
		}
		mu.Lock()
		run.calls = append(run.calls, rc)
		mu.Unlock()
	}
	// settled reports whether the readings after C's recovery are in: B's first
	// success, and the circuit closed.
	settled := func() bool {
		c.mu.Lock()
		upAt := c.upAt
		c.mu.Unlock()
		mu.Lock()
		run.upAt = upAt
		_, ok := run.firstSuccess()
		mu.Unlock()
		if ok && w != nil {
			_, ok = w.closedSince(upAt)
		}
		return ok
	}

	fmt.Fprintf(e.verbose, "  circuit breaker, %s: C up, load starts\n", variant)
	var wg sync.WaitGroup
	tick := time.NewTicker(brInterval)
	run.start = time.Now()
	down, up, stopAt := run.start.Add(brWarmup), run.start.Add(brWarmup+brOutage), time.Time{}
	phase := 0 // 0 warm-up, 1 C down, 2 C back
	for {
		now := time.Now()
		if !stopAt.IsZero() && !now.Before(stopAt) {
			break
		}
		switch {
		case phase == 0 && !now.Before(down):
			c.setDown(true)
			phase = 1
			fmt.Fprintf(e.verbose, "  circuit breaker, %s: C down at +%s\n", variant, seconds(now.Sub(run.start)))
		case phase == 1 && !now.Before(up):
			c.setDown(false)
			phase = 2
			fmt.Fprintf(e.verbose, "  circuit breaker, %s: C back at +%s\n", variant, seconds(now.Sub(run.start)))
		case phase == 2 && stopAt.IsZero() && (settled() || now.Sub(up) > brMaxAfter):
			stopAt = now.Add(brSettle)
		}
		whileDown := phase == 1
		wg.Go(func() { call(whileDown) })
		<-tick.C
	}
	tick.Stop()
	run.end = time.Now()
	wg.Wait()
	if w != nil {
		run.changes = w.stop()
	}
	c.mu.Lock()
	run.downAt, run.upAt, run.whileDown = c.downAt, c.upAt, c.whileDown
	c.mu.Unlock()
	slices.SortFunc(run.calls, func(a, b brCall) int { return a.start.Compare(b.start) })
	if withBreaker {
		fmt.Fprintf(e.verbose, "  circuit breaker, %s: the circuit went %s\n", variant, run.describeChanges())
	}
	if len(run.during()) == 0 {
		return brRun{}, fmt.Errorf("circuit breaker, %s: B started no call while C was down", variant)
	}
	return run, nil
}

// String says what became of the call, for its root span's name.
func (c brCall) String() string {
	took := short(c.took())
	switch {
	case c.open != nil:
		return "refused by the " + c.open.State.String() + " circuit in " + took + ", nothing sent"
	case c.probe && c.err == nil:
		return "a probe, C answered in " + took
	case c.probe:
		return "a probe, failed after " + took + " (" + clientSaw(c.err) + ")"
	case c.err == nil:
		return "C answered in " + took
	}
	return "failed after " + took + " (" + clientSaw(c.err) + ")"
}

// during returns the calls B started while C was down.
func (r brRun) during() []brCall {
	var out []brCall
	for _, c := range r.calls {
		if !c.start.Before(r.downAt) && c.start.Before(r.upAt) {
			out = append(out, c)
		}
	}
	return out
}

// failTime returns the median time B took to fail a call started while C was down,
// and the number of those calls that failed.
func (r brRun) failTime() (time.Duration, int) {
	var took []time.Duration
	for _, c := range r.during() {
		if c.err != nil {
			took = append(took, c.took())
		}
	}
	return median(took), len(took)
}

// failTimeOpen returns the median time B took to fail a call started while the
// circuit was open, and the number of those calls.
func (r brRun) failTimeOpen() (time.Duration, int) {
	var took []time.Duration
	for _, c := range r.calls {
		if c.err != nil && r.stateAt(c.start) == string(record.BreakerOpen) {
			took = append(took, c.took())
		}
	}
	return median(took), len(took)
}

func (r brRun) refusedDuring() int {
	n := 0
	for _, c := range r.during() {
		if c.open != nil {
			n++
		}
	}
	return n
}

// failedBefore counts the calls that reached C while it was down and failed by t.
func (r brRun) failedBefore(t time.Time) int {
	n := 0
	for _, c := range r.during() {
		if c.err != nil && c.open == nil && !c.end.After(t) {
			n++
		}
	}
	return n
}

// failedAfter counts the calls B started after C came back that failed.
func (r brRun) failedAfter() int {
	n := 0
	for _, c := range r.calls {
		if !c.start.Before(r.upAt) && c.err != nil {
			n++
		}
	}
	return n
}

// firstSuccess returns the end of the first call answered after C came back.
func (r brRun) firstSuccess() (time.Time, bool) {
	var first time.Time
	for _, c := range r.calls {
		if c.err == nil && c.end.After(r.upAt) && (first.IsZero() || c.end.Before(first)) {
			first = c.end
		}
	}
	return first, !r.upAt.IsZero() && !first.IsZero()
}

// firstChange returns when the circuit first moved to state after t.
func (r brRun) firstChange(state string, t time.Time) (time.Time, bool) {
	for _, ch := range r.changes {
		if ch.to == state && ch.at.After(t) {
			return ch.at, true
		}
	}
	return time.Time{}, false
}

// describeChanges lists the circuit's changes with their time in the run.
func (r brRun) describeChanges() string {
	if len(r.changes) == 0 {
		return "nowhere"
	}
	var parts []string
	for _, ch := range r.changes {
		parts = append(parts, fmt.Sprintf("%s at +%s", ch.to, seconds(ch.at.Sub(r.start))))
	}
	return strings.Join(parts, ", ")
}

// stateAt returns the circuit's state at t, as the metric showed it.
func (r brRun) stateAt(t time.Time) string {
	s := string(record.BreakerClosed)
	for _, ch := range r.changes {
		if ch.at.After(t) {
			break
		}
		s = ch.to
	}
	return s
}

// timeline draws the run on B's time axis, one column per 100 ms of calls started:
// C '.' up, '#' down; B '.' every call answered, 'x' a call failed after reaching C
// (or waiting for a probe), '-' calls refused at once; the circuit '.' closed, 'O'
// open, 'h' half-open.
func (r brRun) timeline(out io.Writer) {
	const step = 100 * time.Millisecond
	cols := int(r.end.Sub(r.start)/step) + 1
	col := func(t time.Time) int { return min(max(int(t.Sub(r.start)/step), 0), cols-1) }
	cRow := []byte(strings.Repeat(".", cols))
	for i := col(r.downAt); i < col(r.upAt); i++ {
		cRow[i] = '#'
	}
	bRow := []byte(strings.Repeat(" ", cols))
	for _, c := range r.calls {
		i := col(c.start)
		switch {
		case c.err != nil && (c.open == nil || c.took() >= time.Millisecond):
			bRow[i] = 'x'
		case c.err != nil && bRow[i] != 'x':
			bRow[i] = '-'
		case bRow[i] == ' ':
			bRow[i] = '.'
		}
	}
	title := "without the breaker"
	if r.withBreaker {
		title = "with the breaker"
	}
	fmt.Fprintf(out, "%s (one column = %v of calls started; C: # down; B: . answered, x failed after waiting, - refused at once)\n", title, step)
	axis := []byte(strings.Repeat(" ", cols))
	for i := 0; i < cols; i += 10 {
		copy(axis[i:], fmt.Sprintf("%d s", i/10))
	}
	fmt.Fprintf(out, "          %s\n", axis)
	fmt.Fprintf(out, "  C       %s\n", cRow)
	fmt.Fprintf(out, "  B       %s\n", bRow)
	if !r.withBreaker {
		return
	}
	// A column shows the state at its end, or half-open if the circuit was half-open
	// at any time in it (a failed probe may keep it so for a few ms only).
	circuit := []byte(strings.Repeat(".", cols))
	for i := range circuit {
		switch record.BreakerState(r.stateAt(r.start.Add(time.Duration(i+1) * step))) {
		case record.BreakerOpen:
			circuit[i] = 'O'
		case record.BreakerHalfOpen:
			circuit[i] = 'h'
		}
	}
	for _, ch := range r.changes {
		if ch.to == string(record.BreakerHalfOpen) {
			circuit[col(ch.at)] = 'h'
		}
	}
	fmt.Fprintf(out, "  circuit %s (. closed, O open, h half-open)\n", circuit)
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// short formats a duration: microseconds below 1 ms, else milliseconds, else seconds.
func short(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return msPrecise(d)
	}
	return seconds(d)
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// circuitWatch follows one circuit's state as the user reads it: the breaker the
// client shares (deadlinekit.WithSharedBreaker), polled every brPoll.
type circuitWatch struct {
	b      *breaker.Breaker
	target string
	done   chan struct{}
	exited chan struct{}

	mu      sync.Mutex
	changes []stateChange
}

func watchCircuit(b *breaker.Breaker, target string) *circuitWatch {
	w := &circuitWatch{b: b, target: target, done: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(w.exited)
		t := time.NewTicker(brPoll)
		defer t.Stop()
		last := breaker.Closed
		for {
			select {
			case <-w.done:
				return
			case <-t.C:
			}
			// An open circuit whose sleep is over reads half-open: the next call is a
			// probe.
			if s := w.b.State(w.target); s != last {
				w.mu.Lock()
				w.changes = append(w.changes, stateChange{at: time.Now(), to: string(otelState(s))})
				w.mu.Unlock()
				last = s
			}
		}
	}()
	return w
}

// otelState names a state as the toolkit's telemetry does.
func otelState(s breaker.State) record.BreakerState {
	switch s {
	case breaker.Open:
		return record.BreakerOpen
	case breaker.HalfOpen:
		return record.BreakerHalfOpen
	}
	return record.BreakerClosed
}

// closedSince returns when the circuit was first seen closing after t.
func (w *circuitWatch) closedSince(t time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range w.changes {
		if ch.to == string(record.BreakerClosed) && ch.at.After(t) {
			return ch.at, true
		}
	}
	return time.Time{}, false
}

// stop ends the watch and returns the changes seen.
func (w *circuitWatch) stop() []stateChange {
	close(w.done)
	<-w.exited
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changes
}

// probeSpotter is a span processor on B's provider: it notes the traces in which a
// span says the breaker let the call through as a half-open probe
// (deadlinekit.breaker.probe), so that the demo can name and print them.
type probeSpotter struct {
	mu     sync.Mutex
	traces map[trace.TraceID]bool
}

func (p *probeSpotter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (p *probeSpotter) OnEnd(s sdktrace.ReadOnlySpan) {
	for _, kv := range s.Attributes() {
		if kv.Key == otelattr.BreakerProbeKey && kv.Value.AsBool() {
			p.mu.Lock()
			p.traces[s.SpanContext().TraceID()] = true
			p.mu.Unlock()
			return
		}
	}
}

func (p *probeSpotter) Shutdown(context.Context) error   { return nil }
func (p *probeSpotter) ForceFlush(context.Context) error { return nil }

func (p *probeSpotter) has(id trace.TraceID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.traces[id]
}
