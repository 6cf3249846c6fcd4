package admissioncmp

import (
	"container/heap"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// sharer is the saturation backend with Shape.Shared: the knee's capacity shared
// among the requests working (processor sharing, as K cores are among the
// requests they run). Each job needs its work of full-speed time; with n working
// beyond the knee, each advances at knee/n of full speed, so that every request
// in flight slows when one more starts and speeds up when one ends. The
// throughput is knee/Work however many run beyond it: more at once only adds
// latency, and a request handed a slot a moment late costs nothing while at
// least knee others work. Its timer notices a job's end late (Go's timers on a
// loaded machine, as the slots' sleeps do): the job ends on time and leaves its
// share to the others, but its handler returns, and a request can take its
// place, only then.
type sharer struct {
	knee  func(now time.Time) int
	from  *atomic.Int64 // when the measured part begins (Unix ns; 0: not yet)
	until atomic.Int64  // when it ends (Unix ns; 0: not known)

	mu    sync.Mutex
	v     float64   // virtual time: the work done by a job present throughout (ns)
	at    time.Time // when v was last advanced
	jobs  jobHeap
	timer *time.Timer
	// late holds how late the timer fired after a job's end (up to maxLate of
	// them): the job ends on time, but its handler learns it late, and only then
	// can a request take its place. want is when the timer is due.
	late []time.Duration
	want time.Time
	// unused and capacity are, over the measured part, the knee's capacity
	// left unused (fewer than knee jobs working) and all of it, in job-ns.
	unused, capacity float64
}

const maxLate = 1 << 16

type job struct {
	finish float64 // the virtual time it is done at
	done   chan struct{}
	index  int // in jobs; -1: done or removed
}

func newSharer(knee func(time.Time) int, from *atomic.Int64) *sharer {
	p := &sharer{knee: knee, from: from}
	p.timer = time.AfterFunc(time.Hour, p.fire)
	p.timer.Stop()
	return p
}

// add starts a job of work (full-speed time); its done is closed when it is done.
func (p *sharer) add(work time.Duration) *job {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.advance(now)
	j := &job{finish: p.v + float64(work), done: make(chan struct{})}
	heap.Push(&p.jobs, j)
	p.arm(now)
	return j
}

// remove ends a job before it is done (its context ended).
func (p *sharer) remove(j *job) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.advance(now)
	if j.index >= 0 {
		heap.Remove(&p.jobs, j.index)
	}
	p.arm(now)
}

// fire ends the jobs that are done and waits for the next.
func (p *sharer) fire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if !p.want.IsZero() && len(p.late) < maxLate {
		p.late = append(p.late, now.Sub(p.want))
	}
	p.advance(now)
	p.arm(now)
}

// rate is the speed of each job with n working. p.mu is held.
func (p *sharer) rate(now time.Time, n int) float64 {
	return min(1, float64(p.knee(now))/float64(max(n, 1)))
}

// advance moves the virtual time to now, ending on the way every job whose work is
// done, at the moment it was: a timer that fires late delays the job's answer, not
// the others' work (a finished request holds no share of the capacity). p.mu is
// held.
func (p *sharer) advance(now time.Time) {
	for len(p.jobs) > 0 {
		next := p.jobs[0].finish - p.v
		if next <= float64(time.Microsecond) {
			close(heap.Pop(&p.jobs).(*job).done)
			continue
		}
		if !now.After(p.at) {
			break
		}
		r := p.rate(now, len(p.jobs))
		if end := p.at.Add(time.Duration(next / r)); !end.After(now) {
			p.account(now, p.at, end, len(p.jobs))
			p.v, p.at = p.jobs[0].finish, end
			close(heap.Pop(&p.jobs).(*job).done)
			continue
		}
		p.v += r * float64(now.Sub(p.at))
		break
	}
	p.account(now, p.at, now, len(p.jobs))
	p.at = now
}

// account adds the capacity used and unused from a to b, with n jobs working, to
// the measured part's. p.mu is held.
func (p *sharer) account(now, a, b time.Time, n int) {
	from := p.from.Load()
	if from == 0 {
		return
	}
	if f := time.Unix(0, from); a.Before(f) {
		a = f
	}
	if u := p.until.Load(); u != 0 && b.After(time.Unix(0, u)) {
		b = time.Unix(0, u)
	}
	if !b.After(a) {
		return
	}
	k := p.knee(now)
	dt := float64(b.Sub(a))
	p.capacity += float64(k) * dt
	p.unused += float64(max(k-n, 0)) * dt
}

// idle is the share of the knee's capacity left unused over the measured part
// so far: time the backend could have worked and no request was there to.
func (p *sharer) idle() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advance(time.Now())
	if p.capacity == 0 {
		return 0
	}
	return p.unused / p.capacity
}

// arm sets the timer for the next job to be done. p.mu is held.
func (p *sharer) arm(now time.Time) {
	if len(p.jobs) == 0 {
		p.timer.Stop()
		p.want = time.Time{}
		return
	}
	left := (p.jobs[0].finish - p.v) / p.rate(now, len(p.jobs))
	p.timer.Reset(time.Duration(max(left, 0)))
	p.want = now.Add(time.Duration(max(left, 0)))
}

type jobHeap []*job

func (h jobHeap) Len() int           { return len(h) }
func (h jobHeap) Less(i, j int) bool { return h[i].finish < h[j].finish }
func (h jobHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *jobHeap) Push(x any) {
	j := x.(*job)
	j.index = len(*h)
	*h = append(*h, j)
}
func (h *jobHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	old[len(old)-1] = nil
	j.index = -1
	*h = old[:len(old)-1]
	return j
}

// lateness is the timer's lateness, p50 and p90, over the jobs' ends so far.
func (p *sharer) lateness() (p50, p90 time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := slices.Clone(p.late)
	if len(l) == 0 {
		return 0, 0
	}
	slices.Sort(l)
	return l[len(l)/2], l[len(l)*9/10]
}
