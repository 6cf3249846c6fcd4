package admissioncmp

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deadlinekit/deadlinekit/propagate"
)

// Mode is how the server's handler treats its request's context.
type Mode uint8

const (
	// Stops: the work ends when its context does, and so does the wait for a
	// worker slot (code that passes its context on, and checks it).
	Stops Mode = iota + 1
	// Ignores: the handler neither waits nor works with its context: it takes a
	// slot, holds it for the whole work and answers (CPU-bound code, or a library
	// that takes no context).
	Ignores
)

func (m Mode) String() string {
	switch m {
	case Stops:
		return "work stops when its context ends"
	case Ignores:
		return "work ignores its context"
	}
	return "unknown mode"
}

// The harness's own headers.
const (
	// headerMeasured marks a request sent in the measured part of a cell.
	headerMeasured = "X-Admissioncmp-Measured"
	// headerGaveUp marks the handler's own answer when its context ended first
	// (mode Stops): not a guard's refusal, no answer in time.
	headerGaveUp = "X-Admissioncmp-Gave-Up"
)

// server is one cell's loopback server of known capacity: Workers slots, each
// request holding one for Work. Holding a slot stands in for CPU work: the
// machine running the harness has too few cores to burn 8 of them, and the
// client shares them.
type server struct {
	mode  Mode
	work  time.Duration
	shape Shape
	slots chan struct{} // nil: the saturation backend (Shape.Knee), no slots
	ps    *sharer       // the saturation backend's shared capacity (Shape.Shared)
	// stop is closed at the cell's end, after the client has given up on every
	// request: it releases the handlers still waiting for a slot (in mode
	// Ignores nothing else would, for seconds), without working.
	stop chan struct{}

	srv      *http.Server
	ln       net.Listener
	handlers sync.WaitGroup
	served   sync.WaitGroup
	// closing is set, under its write lock, when close begins: a request that
	// reaches the server after that (its caller long gone) is answered without a
	// handler, so that no handler joins the wait group while close waits on it.
	closeMu sync.RWMutex
	closing bool

	// from is when the measured part of the cell begins (Unix ns; 0: not yet).
	// The work that ends after it is counted, whichever request it was for: busy
	// is the time slots were held, wasted the part of it for requests whose
	// context had ended (deadline passed, or the caller gone) when the work
	// ended; worked counts those requests. cut counts the measured requests
	// released by stop, never having worked.
	from         atomic.Int64
	busy, wasted atomic.Int64 // time.Duration
	worked, cut  atomic.Int64
	// inside counts the requests in the handler (waiting for a slot or holding
	// one), past any guard; peak is its largest value after the warm-up: the
	// concurrency the guard let through.
	inside, peak atomic.Int64
	// working counts the handlers doing their work (holding a slot).
	working atomic.Int64
	// conc samples inside every 10 ms from the start of the measured part.
	conc    []int64
	sampled sync.WaitGroup
}

// sample records inside every 10 ms from the measured part's start until stop.
func (s *server) sample() {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.conc = sampleAt(s.conc, s.from.Load(), now.UnixNano(), s.inside.Load())
		}
	}
}

// sampleAt adds the reading v taken at now (Unix ns) to conc, whose sample i is
// the reading at i × 10 ms after from (0: not yet). A loaded machine drops ticks:
// the slots a late tick skipped take its reading, so the time axis holds.
func sampleAt(conc []int64, from, now, v int64) []int64 {
	if from == 0 || now < from {
		return conc
	}
	for n := int((now - from) / int64(10*time.Millisecond)); len(conc) <= n; {
		conc = append(conc, v)
	}
	return conc
}

// duration is the work of a request starting now with n handlers working (itself
// included): the shape's slowdown, and beyond the knee every request slower in
// proportion (the knee's share is the sharer's, with Shape.Shared).
func (s *server) duration(now time.Time, n int64) time.Duration {
	d := s.base(now)
	if k := s.knee(now); k > 0 && s.ps == nil && n > int64(k) {
		d = time.Duration(float64(d) * float64(n) / float64(k))
	}
	return d
}

// base is the work of a request starting now: the shape's slowdown, no knee.
func (s *server) base(now time.Time) time.Duration {
	d := s.work
	from := s.from.Load()
	if from == 0 {
		return d
	}
	at := time.Duration(now.UnixNano() - from)
	if sl := s.shape.Slow; sl.Factor > 0 && at >= sl.From && (sl.For == 0 || at < sl.From+sl.For) {
		d = time.Duration(float64(d) * sl.Factor)
	}
	return d
}

// knee is the saturation backend's knee at now (zero: the slots).
func (s *server) knee(now time.Time) int {
	k := s.shape.Knee
	if from := s.from.Load(); k > 0 && s.shape.KneeAfter > 0 && from != 0 && time.Duration(now.UnixNano()-from) >= s.shape.KneeAt {
		k = s.shape.KneeAfter
	}
	return k
}

// newServer starts a server on 127.0.0.1 with the toolkit's propagate middleware
// outermost, then guard (nil: none), then the work. It speaks HTTP/2 without TLS
// (h2c), as gRPC does: a request its caller gives up on resets its stream
// instead of closing a connection, so an overload costs no dials, sockets or
// ports, and the server sees the caller leave at once.
func newServer(mode Mode, workers int, work time.Duration, shape Shape, guard func(http.Handler) http.Handler) (*server, error) {
	s := &server{mode: mode, work: work, shape: shape, stop: make(chan struct{})}
	switch {
	case shape.Knee == 0:
		s.slots = make(chan struct{}, workers)
	case shape.Shared:
		s.ps = newSharer(s.knee, &s.from)
	}
	var h http.Handler = http.HandlerFunc(s.serve)
	if guard != nil {
		h = guard(h)
	}
	h = propagate.NewMiddleware()(h)
	outer := h
	h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.closeMu.RLock()
		if s.closing {
			s.closeMu.RUnlock()
			s.giveUp(w)
			return
		}
		s.handlers.Add(1)
		s.closeMu.RUnlock()
		defer s.handlers.Done()
		outer.ServeHTTP(w, r)
	})
	ln, srv, err := listenH2C(h)
	if err != nil {
		return nil, err
	}
	s.ln, s.srv = ln, srv
	s.served.Go(func() { _ = s.srv.Serve(ln) })
	s.sampled.Go(s.sample)
	return s, nil
}

// listenH2C listens on a free loopback port for a server of h that speaks HTTP/1
// and unencrypted HTTP/2, serving every request at once (a gRPC server's default:
// an unguarded server must be able to pile its overload up). The caller serves.
func listenH2C(h http.Handler) (net.Listener, *http.Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return ln, &http.Server{Handler: h, Protocols: &p, ReadHeaderTimeout: 10 * time.Second,
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 1 << 20}}, nil
}

func (s *server) url() string { return "http://" + s.ln.Addr().String() + "/work" }

// serve is the work: wait for a slot, hold it for s.work, answer 200.
func (s *server) serve(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	n := s.inside.Add(1)
	defer s.inside.Add(-1)
	if s.from.Load() != 0 && time.Now().UnixNano() >= s.from.Load() {
		for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
		}
	}
	var done <-chan struct{}
	if s.mode == Stops {
		done = ctx.Done()
	}
	slots := s.slots
	if slots == nil {
		slots = make(chan struct{}, 1) // the saturation backend: no slot to wait for
	}
	select {
	case slots <- struct{}{}:
	case <-done:
		s.giveUp(w)
		return
	case <-s.stop:
		if r.Header.Get(headerMeasured) != "" {
			s.cut.Add(1)
		}
		s.giveUp(w)
		return
	}
	start := time.Now()
	work := s.duration(start, s.working.Add(1))
	finished := true
	if s.ps != nil {
		j := s.ps.add(work)
		select {
		case <-j.done:
		case <-done: // nil in mode Ignores
			s.ps.remove(j)
			finished = false
		}
	} else if s.mode == Stops {
		t := time.NewTimer(work)
		select {
		case <-t.C:
		case <-done:
			finished = false
		}
		t.Stop()
	} else {
		time.Sleep(work)
	}
	end := time.Now()
	took := end.Sub(start)
	s.working.Add(-1)
	<-slots
	if from := s.from.Load(); from != 0 && end.UnixNano() >= from {
		s.worked.Add(1)
		s.busy.Add(int64(took))
		if ctx.Err() != nil {
			s.wasted.Add(int64(took))
		}
	}
	if !finished {
		s.giveUp(w)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// giveUp answers a request whose context ended before its work did: nobody is
// waiting for the answer.
func (s *server) giveUp(w http.ResponseWriter) {
	w.Header().Set(headerGaveUp, "1")
	w.WriteHeader(http.StatusGatewayTimeout)
}

// close releases the handlers still waiting for a slot, waits for every handler
// to return and stops the server. The client is done: nothing is left to answer.
func (s *server) close() {
	s.closeMu.Lock()
	s.closing = true
	s.closeMu.Unlock()
	close(s.stop)
	s.sampled.Wait()
	s.handlers.Wait()
	_ = s.srv.Close()
	s.served.Wait()
}
