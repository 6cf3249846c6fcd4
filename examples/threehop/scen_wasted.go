package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/propagate"
)

// The wasted-work scenario: 100 ms of work per hop under a 250 ms client budget,
// once with independent 300 ms timeouts per hop, once with the deadline propagated.
const (
	hopWork      = 100 * time.Millisecond
	clientBudget = 250 * time.Millisecond
	ownTimeout   = 300 * time.Millisecond
)

// hopRecord is what one service recorded about the request it served.
type hopRecord struct {
	name      string
	received  time.Time
	budget    time.Duration // time left on arrival (own timeout when independent)
	workEnd   time.Time
	leftAtEnd time.Duration
	canceled  bool
}

// recorder collects the hops' records; the services write to it as they go.
type recorder struct {
	mu      sync.Mutex
	start   time.Time
	hops    map[string]hopRecord
	working map[string]bool // hops that began their work and have not recorded its end
	aDone   bool            // A's handler returned: nothing of the request starts any more
	changed chan struct{}   // signalled whenever a hop records
	log     io.Writer
}

func newRecorder(log io.Writer) *recorder {
	return &recorder{hops: map[string]hopRecord{}, working: map[string]bool{}, changed: make(chan struct{}, 1), log: log}
}

// work does a hop's share of work, stopping early if ctx ends, and records it.
func (r *recorder) work(ctx context.Context, name string, d time.Duration) error {
	h := hopRecord{name: name, received: time.Now()}
	h.budget, _ = deadline.Remaining(ctx)
	r.mu.Lock()
	r.working[name] = true
	r.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		h.canceled = true
	}
	h.workEnd = time.Now()
	h.leftAtEnd, _ = deadline.Remaining(ctx)

	r.mu.Lock()
	defer r.mu.Unlock()
	r.hops[name] = h
	delete(r.working, name)
	end := "finished"
	if h.canceled {
		end = "cancelled"
	}
	fmt.Fprintf(r.log, "    %s: received at +%s with %s left, work %s at +%s\n",
		name, msPrecise(h.received.Sub(r.start)), msPrecise(h.budget), end, msPrecise(h.workEnd.Sub(r.start)))
	select {
	case r.changed <- struct{}{}:
	default:
	}
	if h.canceled {
		return ctx.Err()
	}
	return nil
}

// wastedRun is one run of the chain: what the hops recorded and when the client gave up.
type wastedRun struct {
	propagated bool
	start      time.Time
	gaveUp     time.Time
	hops       [3]hopRecord
}

// wasted is C's work after the client gave up (none when the request never reached C).
func (w wastedRun) wasted() time.Duration {
	if !w.hops[2].reached() {
		return 0
	}
	return max(w.hops[2].workEnd.Sub(w.gaveUp), 0)
}

// reached reports whether the request reached the hop at all.
func (h hopRecord) reached() bool { return !h.received.IsZero() }

// settled reports whether every hop the request reached has recorded how its work
// ended: A's handler has returned (A calls B and B calls C in turn, so no hop starts
// after that) and no hop that began its work is still at it. A hop may not be reached
// at all: on a very loaded machine an earlier hop's budget can run out, or fall below
// the floor, before it calls the next one.
func (r *recorder) settled() bool { return r.aDone && len(r.working) == 0 }

// done records that A's handler returned.
func (r *recorder) done() {
	r.mu.Lock()
	r.aDone = true
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func runWasted(e *env) ([]reading, error) {
	var runs [2]wastedRun
	for i, propagated := range []bool{false, true} {
		r, err := runWastedOnce(e, propagated)
		if err != nil {
			return nil, err
		}
		runs[i] = r
	}
	for _, r := range runs {
		fmt.Fprintln(e.out)
		r.waterfall(e.out)
	}
	ind, prop := runs[0], runs[1]
	return []reading{
		{"wasted work", "C's work after the client gave up", msPrecise(ind.wasted()), msPrecise(prop.wasted())},
		{"", "how C's work ended", ind.hops[2].ending(ind.start), prop.hops[2].ending(prop.start)},
	}, nil
}

func (h hopRecord) ending(start time.Time) string {
	if !h.reached() {
		return "not reached"
	}
	if h.canceled {
		return "cancelled at +" + ms(h.workEnd.Sub(start))
	}
	return "finished at +" + ms(h.workEnd.Sub(start))
}

func runWastedOnce(e *env, propagated bool) (wastedRun, error) {
	rec := newRecorder(e.verbose)
	// Without the toolkit, every hop works under its own fresh timeout (the
	// anti-pattern: a per-hop timeout on a context detached from the caller's).
	// context.WithoutCancel keeps the request's values, the trace among them, and
	// drops its deadline and cancellation: the trace travels, the deadline does
	// not, so the one trace shows C working after the client gave up.
	hop := func(name string) hopFunc {
		return func(ctx context.Context, next func(context.Context) error) error {
			if name == "A" {
				defer rec.done()
			}
			if !propagated {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), ownTimeout)
				defer cancel()
			}
			if err := rec.work(ctx, name, hopWork); err != nil || next == nil {
				return err
			}
			return next(ctx)
		}
	}
	spec := chainSpec{a: hop("A"), b: hop("B"), c: hop("C")}
	if propagated {
		spec.serverA, spec.serverC = propagate.NewMiddleware(), propagate.NewMiddleware()
		spec.serverB = append(spec.serverB, propagate.UnaryServerInterceptor())
		spec.clientToA, spec.bToC = propagateTransport, propagateTransport
		spec.aToB = append(spec.aToB, propagate.UnaryClientInterceptor())
	}
	ch, err := startChain(e.tel, spec)
	if err != nil {
		return wastedRun{}, err
	}
	defer ch.stop()

	title, variant := "wasted work: independent 300 ms timeouts", "own 300 ms timeout per hop"
	if propagated {
		title, variant = "wasted work: deadline propagated", "deadline propagated"
	}
	ctx, root := e.tel.root(context.Background(), "wasted work, "+variant)
	e.trace(title, root)
	rec.start = time.Now()
	ctx, cancel := context.WithTimeout(ctx, clientBudget)
	defer cancel()
	fmt.Fprintf(e.verbose, "  %s\n", title)
	err = ch.call(ctx)
	root.SetName("wasted work, " + variant + ": the client " + clientSaw(err))
	root.End()
	// The client's own deadline ends the call, or (propagated) a hop's deadline
	// that fired a hair earlier brings its 504 just in time.
	if err != nil && !errors.Is(err, context.DeadlineExceeded) && statusOf(err) != http.StatusGatewayTimeout {
		return wastedRun{}, fmt.Errorf("client: %w", err)
	}
	run := wastedRun{propagated: propagated, start: rec.start}
	run.gaveUp, _ = ctx.Deadline()
	timeout := time.After(2 * time.Second)
	for {
		rec.mu.Lock()
		if rec.settled() {
			break
		}
		rec.mu.Unlock()
		select {
		case <-rec.changed:
		case <-timeout:
			rec.mu.Lock()
			defer rec.mu.Unlock()
			return wastedRun{}, fmt.Errorf("the hops did not record how their work ended within 2 s (A returned %v, still working %v, recorded %v)", rec.aDone, rec.working, rec.hops)
		}
	}
	defer rec.mu.Unlock()
	for i, name := range []string{"A", "B", "C"} {
		run.hops[i] = rec.hops[name] // zero when not reached
	}
	return run, nil
}

// waterfall draws the hops on the client's time axis: '#' work, 'x' work cancelled,
// '|' work finished, '!' the client's deadline.
func (w wastedRun) waterfall(out io.Writer) {
	const step = 5 * time.Millisecond // one column
	const cols = 66                   // 0 to 330 ms
	col := func(t time.Time) int { return min(max(int(t.Sub(w.start)/step), 0), cols-1) }
	title := "independent 300 ms timeouts per hop"
	if w.propagated {
		title = "deadline propagated"
	}
	fmt.Fprintf(out, "%s (one column = %v; ! = the client gives up)\n", title, step)
	axis := []byte(strings.Repeat(" ", cols))
	for t := 0; t < cols; t += 20 {
		copy(axis[t:], fmt.Sprintf("%d ms", t*int(step/time.Millisecond)))
	}
	fmt.Fprintf(out, "         %s\n", axis)
	dl := col(w.gaveUp)
	client := []byte(strings.Repeat(" ", cols))
	for i := 0; i < dl; i++ {
		client[i] = '-'
	}
	client[dl] = '!'
	fmt.Fprintf(out, "  client %s gave up at +%s\n", client, ms(w.gaveUp.Sub(w.start)))
	for i, h := range w.hops {
		if !h.reached() {
			fmt.Fprintf(out, "  %-6s %s not reached: the budget ran out upstream\n", [...]string{"A", "B", "C"}[i], strings.Repeat(" ", cols))
			continue
		}
		row := []byte(strings.Repeat(" ", cols))
		row[dl] = ':'
		from, to := col(h.received), col(h.workEnd)
		for i := from; i < to; i++ {
			row[i] = '#'
		}
		end := byte('|')
		if h.canceled {
			end = 'x'
		}
		row[to] = end
		budget := "its own " + ms(h.budget)
		if w.propagated {
			budget = msPrecise(h.budget) + " left"
		}
		fmt.Fprintf(out, "  %-6s %s received with %s; %s\n", h.name, row, budget, h.ending(w.start))
	}
}
