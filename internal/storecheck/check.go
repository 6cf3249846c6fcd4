package storecheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/deadlinekit/deadlinekit/dedup"
)

// violation is one broken rule, at one call.
type violation struct {
	key string
	at  *op
	msg string
}

// gen is one lease granted: the Acquire that took it, and the first Complete or
// Release that succeeded with its token.
type gen struct {
	acq, fin *op
}

// checker judges a history; every rule is one that holds whatever order the
// store gave concurrent calls: it asserts only what was sure, from which calls
// returned before which others started, and from the clock.
type checker struct {
	c     *config
	h     *history
	gens  map[string][]*gen // by key, in the order the Acquires started
	byTok map[string]*gen
	out   []violation
}

func check(c *config, h *history) []violation {
	slices.SortFunc(h.ops, func(a, b *op) int { return int(a.start.seq - b.start.seq) })
	k := &checker{c: c, h: h, gens: map[string][]*gen{}, byTok: map[string]*gen{}}
	for _, o := range h.ops {
		if o.kind == opAcquire && o.acquired && o.err == nil {
			g := &gen{acq: o}
			k.gens[o.key] = append(k.gens[o.key], g)
			k.byTok[o.token] = g
		}
	}
	for _, o := range h.ops { // in start order: fin is the first success
		if g := k.byTok[o.token]; g != nil && g.fin == nil && o.err == nil && (o.kind == opComplete || o.kind == opRelease) {
			g.fin = o
		}
	}
	for _, o := range h.ops {
		k.judge(o)
	}
	return k.out
}

func (k *checker) fail(o *op, format string, args ...any) {
	k.out = append(k.out, violation{key: o.key, at: o, msg: k.describe(o) + ": " + fmt.Sprintf(format, args...)})
}

func (k *checker) judge(o *op) {
	switch {
	case o.kind == opWait && errors.Is(o.err, context.DeadlineExceeded):
		k.waitedOut(o)
		return
	case (o.kind == opComplete || o.kind == opRelease) && (o.err == nil || errors.Is(o.err, dedup.ErrLeaseLost)):
		k.finished(o)
		return
	case o.err != nil:
		k.fail(o, "unexpected error %v", o.err)
		return
	case o.kind == opAcquire && o.acquired:
		k.sawState(o, nil, "it absent")
		return
	}
	// An observation: Get, Wait, or an Acquire that returned the record.
	e := o.entry
	switch e.State {
	case dedup.Absent:
		if e.Fingerprint != "" || len(e.Answer) > 0 {
			k.fail(o, "an Absent record with a fingerprint or an answer")
		}
		if o.kind == opAcquire {
			k.fail(o, "Acquire neither took the key nor returned its record")
		}
		k.sawState(o, nil, "it absent")
	case dedup.Running:
		if o.kind == opWait {
			k.fail(o, "Wait returned a Running record")
		}
		k.sawRunning(o)
	case dedup.Done:
		k.sawDone(o)
	default:
		k.fail(o, "a record in state %v", e.State)
	}
}

// sawRunning judges a call that saw a lease.
func (k *checker) sawRunning(o *op) {
	e := o.entry
	g := k.byTok[strings.TrimPrefix(e.Fingerprint, "fp:")]
	if len(e.Answer) > 0 {
		k.fail(o, "a Running record with an answer")
	}
	if g == nil || g.acq.key != o.key || g.acq.fp != e.Fingerprint {
		k.fail(o, "a lease with fingerprint %q, which no Acquire of this key was granted", e.Fingerprint)
		return
	}
	if g.fin != nil && g.fin.end.seq < o.start.seq {
		k.fail(o, "the lease of %s still running after its %s returned", g.acq.token, g.fin.kind)
	}
	end := g.acq.end.at.Add(g.acq.ttl + k.c.slack)
	if o.start.at.After(end) {
		k.fail(o, "the lease of %s still running %v after its TTL ran out", g.acq.token, o.start.at.Sub(end))
	}
	k.left(o, g.acq.start.at.Add(g.acq.ttl), end)
	k.sawState(o, g, "its lease Running")
}

// sawDone judges a call that saw an answer.
func (k *checker) sawDone(o *op) {
	e := o.entry
	tok, _, _ := bytes.Cut(e.Answer, []byte("|"))
	g := k.byTok[string(tok)]
	if g == nil || g.acq.key != o.key || g.fin == nil || g.fin.kind != opComplete {
		k.fail(o, "an answer %q that no successful Complete of this key stored", e.Answer)
		return
	}
	c := g.fin
	if !bytes.Equal(e.Answer, c.answer) {
		k.fail(o, "answer %q, not byte-equal to the one %s stored, %q", e.Answer, c.token, c.answer)
	}
	if e.Fingerprint != g.acq.fp {
		k.fail(o, "answer with fingerprint %q, not its lease's %q", e.Fingerprint, g.acq.fp)
	}
	if o.end.seq < c.start.seq {
		k.fail(o, "the answer of %s seen before its Complete was called", c.token)
	}
	end := c.end.at.Add(c.retain + k.c.slack)
	if o.start.at.After(end) {
		k.fail(o, "the answer of %s still kept %v after its retention ended", c.token, o.start.at.Sub(end))
	}
	k.left(o, c.start.at.Add(c.retain), end)
	k.sawState(o, g, "its answer")
}

// left checks e.Left against the record's end, which is in [lo, hi].
func (k *checker) left(o *op, lo, hi time.Time) {
	l := o.entry.Left
	if most := hi.Sub(o.start.at); l > most {
		k.fail(o, "Left %v, more than the record has (at most %v)", l, most)
	}
	if least := lo.Sub(o.end.at) - k.c.slack; l < least {
		k.fail(o, "Left %v, less than the record has (at least %v)", l, least)
	}
}

// sawState checks that no other lease surely held, and no other answer was surely
// kept, while o ran: o saw seen's record (nil: none).
func (k *checker) sawState(o *op, seen *gen, what string) {
	for _, g := range k.gens[o.key] {
		if g == seen || g.acq == o {
			continue
		}
		if k.surelyRunning(g, o) {
			k.fail(o, "saw %s while the lease of %s surely held", what, g.acq.token)
		}
		if k.surelyDone(g, o) {
			k.fail(o, "saw %s while the answer of %s was surely kept", what, g.acq.token)
		}
	}
}

// surelyRunning says whether g's lease held for all of o: it was granted before o
// started, not finished before o ended, and its TTL had not run out when o ended.
func (k *checker) surelyRunning(g *gen, o *op) bool {
	return g.acq.end.seq < o.start.seq && (g.fin == nil || o.end.seq < g.fin.start.seq) &&
		o.end.at.Before(g.acq.start.at.Add(g.acq.ttl-k.c.slack))
}

// surelyDone says whether g's answer was kept for all of o.
func (k *checker) surelyDone(g *gen, o *op) bool {
	c := g.fin
	return c != nil && c.kind == opComplete && c.end.seq < o.start.seq &&
		o.end.at.Before(c.start.at.Add(c.retain-k.c.slack))
}

// finished judges a Complete or a Release.
func (k *checker) finished(o *op) {
	g := k.byTok[o.token]
	if g == nil || g.acq.key != o.key {
		if o.err == nil {
			k.fail(o, "succeeded with a token that holds no lease")
		}
		return
	}
	if o.err != nil {
		if (g.fin == nil || g.fin.start.seq > o.start.seq) && o.end.at.Before(g.acq.start.at.Add(g.acq.ttl-k.c.slack)) {
			k.fail(o, "ErrLeaseLost while the lease surely held")
		}
		return
	}
	if g.fin != o {
		k.fail(o, "succeeded a second time for one lease (the first: %s at #%d)", g.fin.kind, g.fin.start.seq)
	}
	if end := g.acq.end.at.Add(g.acq.ttl + k.c.slack); o.start.at.After(end) {
		k.fail(o, "succeeded %v after the lease's TTL ran out", o.start.at.Sub(end))
	}
	for _, g2 := range k.gens[o.key] {
		if g2.acq.start.seq > g.acq.end.seq && g2.acq.end.seq < o.start.seq {
			k.fail(o, "succeeded after %s took the key", g2.acq.token)
		}
	}
}

// waitedOut judges a Wait that returned its context's error: it must not have
// waited out a record that stopped running, unless another lease began meanwhile.
func (k *checker) waitedOut(o *op) {
	var last *gen
	for _, g := range k.gens[o.key] {
		if g.acq.end.seq > o.start.seq && g.acq.start.seq < o.end.seq {
			return // a lease began during the Wait: it may have waited for it
		}
		if g.acq.end.seq < o.start.seq && (last == nil || g.acq.end.seq > last.acq.end.seq) {
			last = g
		}
	}
	if last == nil {
		// A store may take up to notice (plus slack) to answer at all (a first
		// dial under -race took 4 ms): a Wait whose context ended sooner may end
		// with it.
		if o.start.at.Add(k.c.notice + k.c.slack + k.h.lag(o.start.at, o.deadline)).Before(o.deadline) {
			k.fail(o, "waited out its context on a key no lease ever held")
		}
		return
	}
	stopped := last.acq.end.at.Add(last.acq.ttl + k.c.slack)
	if f := last.fin; f != nil && f.end.at.Before(stopped) {
		stopped = f.end.at
	}
	// A Wait that starts after the stop must still ask the store, which may take up
	// to notice (plus slack) to answer: it is judged from its own start then. The
	// machine's lateness meanwhile delays the store's noticing as well.
	from := stopped
	if o.start.at.After(from) {
		from = o.start.at
	}
	if late := k.h.lag(from, o.deadline); from.Add(k.c.notice + k.c.slack + late).Before(o.deadline) {
		k.fail(o, "waited out its context (until %s) though the record stopped running at %s (the machine woke goroutines up to %v late meanwhile)",
			k.rel(o.deadline), k.rel(stopped), late)
	}
}

func (k *checker) rel(t time.Time) string { return "+" + t.Sub(k.h.start).String() }

// describe is one line of history: when, who, what, and what came back.
func (k *checker) describe(o *op) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d–#%d %s…%s g%d %s(%s", o.start.seq, o.end.seq, k.rel(o.start.at), k.rel(o.end.at), o.g, o.kind, o.key)
	switch o.kind {
	case opAcquire:
		fmt.Fprintf(&b, ", %s, ttl %v)", o.token, o.ttl)
	case opComplete:
		fmt.Fprintf(&b, ", %s, %q, retain %v)", o.token, o.answer, o.retain)
	case opRelease:
		fmt.Fprintf(&b, ", %s)", o.token)
	case opWait:
		fmt.Fprintf(&b, ") until %s", k.rel(o.deadline))
	default:
		b.WriteString(")")
	}
	switch {
	case o.err != nil:
		fmt.Fprintf(&b, " → %v", o.err)
	case o.kind == opAcquire && o.acquired:
		b.WriteString(" → acquired")
	case o.kind == opComplete || o.kind == opRelease:
		b.WriteString(" → ok")
	default:
		fmt.Fprintf(&b, " → %v %q left %v", o.entry.State, o.entry.Fingerprint, o.entry.Left)
		if o.entry.State == dedup.Done {
			fmt.Fprintf(&b, " %q", o.entry.Answer)
		}
	}
	return b.String()
}

// dump is the history of key around the call at: up to n calls before it, a few
// after.
func (h *history) dump(c *config, v violation, n int) string {
	k := &checker{c: c, h: h}
	var lines []string
	at := -1
	for _, o := range h.ops {
		if o.key == v.key {
			if o == v.at {
				at = len(lines)
			}
			lines = append(lines, k.describe(o))
		}
	}
	lines = lines[max(at-n, 0):min(at+6, len(lines))]
	return strings.Join(lines, "\n")
}

// summary counts the calls by kind and outcome, to show what a run exercised.
func (h *history) summary() string {
	var granted, refused, completed, released, lost, answers, leases, absent, waitedOut int
	for _, o := range h.ops {
		switch {
		case o.kind == opAcquire && o.acquired:
			granted++
		case o.kind == opAcquire:
			refused++
		case (o.kind == opComplete || o.kind == opRelease) && o.err != nil:
			lost++
		case o.kind == opComplete:
			completed++
		case o.kind == opRelease:
			released++
		case o.err != nil:
			waitedOut++
		case o.entry.State == dedup.Done:
			answers++
		case o.entry.State == dedup.Running:
			leases++
		default:
			absent++
		}
	}
	return fmt.Sprintf("%d calls: %d leases granted, %d refused; %d completed, %d released, %d ErrLeaseLost; "+
		"Get and Wait saw %d answers, %d leases, %d absent, and %d Waits ran out; goroutines woke up to %v late",
		len(h.ops), granted, refused, completed, released, lost, answers, leases, absent, waitedOut,
		h.lag(h.start, time.Now()))
}
