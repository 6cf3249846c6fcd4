package admissioncmp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deadlinekit/deadlinekit/propagate"
)

// The chain cells (issue 37): a client → gateway → service → backend, three
// loopback h2c servers on separate listeners. The gateway is the edge: it sets
// each request's level from its path (/critical/… critical, anything else
// sheddable) and, like the service, forwards the request to the next hop and relays
// its answer. Only the backend works: Workers slots, each request holding one for
// Work. A request the backend does not run (a guard's refusal) may cost it
// RefusalCost × Work of a slot, paid before it answers and ahead of the waiting
// work: what parsing, deciding and answering cost a real server.

// ChainConfig is one chain cell.
type ChainConfig struct {
	// Name names the cell in the RESULT lines (no spaces).
	Name string
	// Workers and Work are the backend's capacity: Workers / Work requests a second.
	Workers int
	Work    time.Duration
	// Load is the offered rate as a multiple of the capacity; Critical is the critical
	// rate as a share of the capacity (at most Load): the rest is sheddable.
	Load, Critical float64
	// MinBudget and MaxBudget bound each request's deadline (uniform draw).
	MinBudget, MaxBudget time.Duration
	// RefusalCost is the share of Work a request the backend refuses costs it.
	RefusalCost float64
	// Warmup is sent before the measured Duration, not counted; Rounds repeats every
	// variant, the order alternating; figures are the rounds' medians.
	Warmup, Duration time.Duration
	Rounds           int
	// Seed seeds the classes and the deadlines (the same for every variant).
	Seed uint64
	// MaxInFlight caps the client's requests in flight (beyond it: dropped, counted).
	MaxInFlight int
}

// Capacity is the backend's capacity in requests per second.
func (c ChainConfig) Capacity() float64 { return float64(c.Workers) / c.Work.Seconds() }

func (c ChainConfig) validate() error {
	if c.Name == "" || strings.ContainsAny(c.Name, " \t\n=") || c.Workers < 1 || c.Workers > 256 || c.Work <= 0 || c.Work > time.Second ||
		!(c.Load > 0 && c.Load <= 20) || !(c.Critical >= 0 && c.Critical <= c.Load) || c.MinBudget <= 0 ||
		c.MaxBudget < c.MinBudget || c.MaxBudget > 10*time.Second || !(c.RefusalCost >= 0 && c.RefusalCost <= 1) ||
		c.Warmup < 0 || c.Warmup > time.Minute || c.Duration <= 0 || c.Duration > time.Minute || c.Rounds < 1 || c.Rounds > 20 ||
		c.MaxInFlight < 1 || c.MaxInFlight > 100000 || c.Capacity()*c.Load > 20000 {
		return fmt.Errorf("admissioncmp: bad chain config %+v", c)
	}
	return nil
}

// ChainFig is what one variant measured in one round of a chain cell.
type ChainFig struct {
	// CriticalGoodput: critical requests answered 2xx within their deadline, as a
	// share of the critical arrivals; TotalGoodput: all such answers per second as a
	// share of the capacity.
	CriticalGoodput, TotalGoodput float64
	// CriticalP99 is the 99th percentile of the critical answers' latency (client's).
	CriticalP99 time.Duration
	// RefusalWork is the backend's slot time spent on refusals as a share of its
	// capacity (Workers × the measured time); BusyWork the share spent working.
	RefusalWork, BusyWork float64
	// Sent, Critical, CriticalOK, OK count the measured requests; Dropped those
	// the client's in-flight cap kept back.
	Sent, Critical, CriticalOK, OK, Dropped int
}

// ChainResult is one variant in one chain cell.
type ChainResult struct {
	Cell, Variant string
	Rounds        []ChainFig
	Med           ChainFig
	// Lost counts the critical requests not answered in time, by where they were
	// lost (summed over the rounds): "gateway: throttled", "backend: overloaded",
	// "client: no answer", "client: 503", ...
	Lost map[string]int
}

// ResultLine is the machine-readable line of r: its figures' medians.
func (r ChainResult) ResultLine() string {
	return fmt.Sprintf("RESULT cell=%s variant=%s critical_goodput=%.4f total_goodput=%.4f critical_p99_ms=%.2f refusal_work=%.4f",
		r.Cell, r.Variant, r.Med.CriticalGoodput, r.Med.TotalGoodput, float64(r.Med.CriticalP99)/float64(time.Millisecond), r.Med.RefusalWork)
}

// RunChain measures every variant in one chain cell.
func RunChain(vs []ChainVariant, cfg ChainConfig) ([]ChainResult, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	out := make([]ChainResult, len(vs))
	for i, v := range vs {
		if v.Name == "" || strings.ContainsAny(v.Name, " \t\n=") {
			return nil, fmt.Errorf("admissioncmp: bad variant name %q", v.Name)
		}
		out[i] = ChainResult{Cell: cfg.Name, Variant: v.Name, Lost: map[string]int{}}
	}
	for round := range cfg.Rounds {
		for j := range vs {
			i := j
			if round%2 == 1 {
				i = len(vs) - 1 - j
			}
			f, err := runChainOnce(vs[i], cfg, round, out[i].Lost)
			if err != nil {
				return nil, fmt.Errorf("admissioncmp: %s: %w", vs[i].Name, err)
			}
			out[i].Rounds = append(out[i].Rounds, f)
		}
	}
	for i := range out {
		out[i].Med = chainMedian(out[i].Rounds)
	}
	return out, nil
}

func chainMedian(fs []ChainFig) ChainFig {
	med := func(get func(ChainFig) float64) float64 {
		v := make([]float64, len(fs))
		for i, f := range fs {
			v[i] = get(f)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	var m ChainFig
	m.CriticalGoodput = med(func(f ChainFig) float64 { return f.CriticalGoodput })
	m.TotalGoodput = med(func(f ChainFig) float64 { return f.TotalGoodput })
	m.CriticalP99 = time.Duration(med(func(f ChainFig) float64 { return float64(f.CriticalP99) }))
	m.RefusalWork = med(func(f ChainFig) float64 { return f.RefusalWork })
	m.BusyWork = med(func(f ChainFig) float64 { return f.BusyWork })
	for _, f := range fs {
		m.Sent += f.Sent
		m.Critical += f.Critical
		m.CriticalOK += f.CriticalOK
		m.OK += f.OK
		m.Dropped += f.Dropped
	}
	return m
}

// losses counts where critical requests were lost, for one run.
type losses struct {
	mu sync.Mutex
	m  map[string]int
}

func (l *losses) add(k string) {
	l.mu.Lock()
	l.m[k]++
	l.mu.Unlock()
}

// hop is one loopback h2c server of the chain.
type hop struct {
	srv    *http.Server
	ln     net.Listener
	served sync.WaitGroup
}

func startHop(h http.Handler) (*hop, error) {
	ln, srv, err := listenH2C(h)
	if err != nil {
		return nil, err
	}
	s := &hop{ln: ln, srv: srv}
	s.served.Go(func() { _ = s.srv.Serve(ln) })
	return s, nil
}

func (s *hop) url() string { return "http://" + s.ln.Addr().String() }

func (s *hop) close() {
	_ = s.srv.Close()
	s.served.Wait()
}

// h2cTransport is a fresh HTTP/2-without-TLS transport, as every hop's client uses.
func h2cTransport() *http.Transport {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{Protocols: &p, Proxy: nil, MaxIdleConns: 16, IdleConnTimeout: 30 * time.Second}
}

// forward is the gateway's and the service's handler: send the request on to next
// with the client, relay its answer (relay turns a failure into the hop's answer:
// the toolkit's WriteHTTPError, or the status as is), and note where a critical
// request was lost (why names a failure of the hop's own client; "": none to note).
func forward(name string, client *http.Client, next string, relay func(http.ResponseWriter, *http.Response, error),
	why func(error) string, lost *losses) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, next+r.URL.Path, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		req.Header.Set(headerMeasured, r.Header.Get(headerMeasured))
		resp, err := client.Do(req)
		if err == nil && resp.StatusCode/100 == 2 {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			w.WriteHeader(http.StatusOK)
			return
		}
		if err != nil && isCritical(r) && r.Header.Get(headerMeasured) != "" {
			if k := why(err); k != "" {
				lost.add(name + ": " + k)
			}
		}
		relay(w, resp, err)
	})
}

// chainBackend is the backend's work: Workers slots, each request holding one for
// Work, refusals paying their cost ahead of the work.
type chainBackend struct {
	work  time.Duration
	cost  time.Duration // a refusal's
	slots *laneSlots
	// from and until bound the measured part (Unix ns); busy and refused are the slot
	// time spent inside it on work and on refusals.
	from, until   atomic.Int64
	busy, refused atomic.Int64
	// paying runs the refusals' costs; stop ends them at the run's end, after
	// closing is set (under closeMu), so that none starts after.
	paying  sync.WaitGroup
	stop    chan struct{}
	closeMu sync.RWMutex
	closing bool
}

// close stops the refusals' costs still waiting or paying.
func (b *chainBackend) close() {
	b.closeMu.Lock()
	b.closing = true
	b.closeMu.Unlock()
	close(b.stop)
	b.paying.Wait()
}

// ranKey is the context key of the flag the work sets: the request was not refused.
type ranKey struct{}

// measuredKey is the context key of a request sent in the measured part, at the
// backend (for the guard's observer).
type measuredKey struct{}

// isCritical reports whether r is of the critical class (the truth, whatever level
// a variant's stack gives it).
func isCritical(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/critical/") }

// lostAtBackend notes a critical request the backend's guard refused, for a
// variant's observer: measured is its request's context value [measuredKey].
func (l *losses) lostAtBackend(ctx context.Context, route, why string) {
	if strings.HasPrefix(route, "/critical/") && ctx.Value(measuredKey{}) != nil {
		l.add("backend: " + why)
	}
}

// serve is the work: wait for a slot (until the context ends), hold it for work.
func (b *chainBackend) serve(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if ran, ok := ctx.Value(ranKey{}).(*atomic.Bool); ok {
		ran.Store(true)
	}
	if !b.slots.acquire(ctx.Done(), false) {
		w.WriteHeader(http.StatusGatewayTimeout)
		return
	}
	start := time.Now()
	t := time.NewTimer(b.work)
	finished := true
	select {
	case <-t.C:
	case <-ctx.Done():
		finished = false
	}
	t.Stop()
	b.account(&b.busy, start, time.Now())
	b.slots.release()
	if !finished {
		w.WriteHeader(http.StatusGatewayTimeout)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// account adds to c the part of [start, end) inside the measured part.
func (b *chainBackend) account(c *atomic.Int64, start, end time.Time) {
	from, until := b.from.Load(), b.until.Load()
	if from == 0 {
		return
	}
	s, e := max(start.UnixNano(), from), min(end.UnixNano(), until)
	if e > s {
		c.Add(e - s)
	}
}

// refusalCost wraps the backend's whole stack: a request answered without the work
// running (a refusal) then holds a slot for its cost, ahead of the requests waiting
// to work. The answer is not held back: the cost stands for the capacity a refusal
// takes from the work, and a client hears of the refusal at once, as it would from
// a server whose refusals cost a tenth of a request.
func (b *chainBackend) refusalCost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if r.Header.Get(headerMeasured) != "" {
			ctx = context.WithValue(ctx, measuredKey{}, true)
		}
		ran := new(atomic.Bool)
		next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, ranKey{}, ran)))
		if b.cost <= 0 || ran.Load() {
			return
		}
		b.closeMu.RLock()
		defer b.closeMu.RUnlock()
		if b.closing {
			return
		}
		b.paying.Go(func() {
			if !b.slots.acquire(b.stop, true) {
				return
			}
			start := time.Now()
			t := time.NewTimer(b.cost)
			select {
			case <-t.C:
			case <-b.stop:
			}
			t.Stop()
			b.account(&b.refused, start, time.Now())
			b.slots.release()
		})
	})
}

// laneSlots is a counting semaphore with two lanes: a waiter of the first lane
// (refusals) gets a freed slot before any of the second (work).
type laneSlots struct {
	mu     sync.Mutex
	free   int
	hi, lo []chan struct{}
}

func newLaneSlots(n int) *laneSlots { return &laneSlots{free: n} }

// acquire takes a slot, waiting until one is free or done is closed (false).
func (s *laneSlots) acquire(done <-chan struct{}, hi bool) bool {
	s.mu.Lock()
	if s.free > 0 {
		s.free--
		s.mu.Unlock()
		return true
	}
	ch := make(chan struct{}, 1)
	if hi {
		s.hi = append(s.hi, ch)
	} else {
		s.lo = append(s.lo, ch)
	}
	s.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-done:
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, q := range []*[]chan struct{}{&s.hi, &s.lo} {
			if i := slices.Index(*q, ch); i >= 0 {
				*q = slices.Delete(*q, i, i+1)
				return false
			}
		}
		// Given a slot as done closed: pass it on.
		s.releaseLocked()
		return false
	}
}

func (s *laneSlots) release() {
	s.mu.Lock()
	s.releaseLocked()
	s.mu.Unlock()
}

func (s *laneSlots) releaseLocked() {
	for _, q := range []*[]chan struct{}{&s.hi, &s.lo} {
		if len(*q) > 0 {
			ch := (*q)[0]
			*q = (*q)[1:]
			ch <- struct{}{}
			return
		}
	}
	s.free++
}

// chainRecord is one client request's fate.
type chainRecord struct {
	critical, measured, ok bool
	took                   time.Duration
	why                    string // for a lost request: "no answer", or the status
}

// runChainOnce runs v once in cfg's cell and returns its figures; the critical
// requests' losses are added to lost.
func runChainOnce(v ChainVariant, cfg ChainConfig, round int, lost map[string]int) (ChainFig, error) {
	ls := &losses{m: map[string]int{}}
	b := &chainBackend{work: cfg.Work, cost: time.Duration(cfg.RefusalCost * float64(cfg.Work)), slots: newLaneSlots(cfg.Workers), stop: make(chan struct{})}
	st := v.Build(cfg.Workers, ls)
	defer st.close()
	back, err := startHop(b.refusalCost(st.Backend(http.HandlerFunc(b.serve))))
	if err != nil {
		return ChainFig{}, err
	}
	defer b.close()
	defer back.close()
	svcT, gwT := h2cTransport(), h2cTransport()
	defer svcT.CloseIdleConnections()
	defer gwT.CloseIdleConnections()
	svcClient := &http.Client{Transport: st.ServiceClient(svcT)}
	svc, err := startHop(st.Service(forward("service", svcClient, back.url(), st.Relay, st.Why, ls)))
	if err != nil {
		return ChainFig{}, err
	}
	defer svc.close()
	gwClient := &http.Client{Transport: st.GatewayClient(gwT)}
	gw, err := startHop(st.Gateway(forward("gateway", gwClient, svc.url(), st.Relay, st.Why, ls)))
	if err != nil {
		return ChainFig{}, err
	}
	defer gw.close()

	base := h2cTransport()
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: propagate.NewTransport(base, propagate.WithFloor(0))}
	recs, dropped := offer(client, gw.url(), cfg, round, b)
	ls.mu.Lock()
	for k, n := range ls.m {
		lost[k] += n
	}
	ls.mu.Unlock()
	return chainFigure(cfg, recs, dropped, b, lost), nil
}

// offer sends the cell's open-loop load at a fixed rate to url and returns every
// measured request's fate, and how many arrivals the in-flight cap dropped.
func offer(client *http.Client, url string, cfg ChainConfig, round int, b *chainBackend) ([]chainRecord, int) {
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Load*1000)<<16^uint64(round)))
	rate := cfg.Load * cfg.Capacity()
	pCritical := cfg.Critical / cfg.Load
	span := int64(cfg.MaxBudget - cfg.MinBudget)
	var (
		mu       sync.Mutex
		recs     []chainRecord
		wg       sync.WaitGroup
		inflight atomic.Int64
		dropped  int
	)
	end := cfg.Warmup + cfg.Duration
	start := time.Now()
	b.from.Store(start.Add(cfg.Warmup).UnixNano())
	b.until.Store(start.Add(end).UnixNano())
	for i := 1; ; i++ {
		at := time.Duration(float64(i) * float64(time.Second) / rate)
		if at >= end {
			break
		}
		budget := cfg.MinBudget + time.Duration(rng.Int64N(span+1))
		critical := rng.Float64() < pCritical
		if d := at - time.Since(start); d > 100*time.Microsecond {
			time.Sleep(d)
		}
		measured := at >= cfg.Warmup
		if inflight.Load() >= int64(cfg.MaxInFlight) {
			if measured {
				dropped++
			}
			continue
		}
		inflight.Add(1)
		wg.Go(func() {
			defer inflight.Add(-1)
			rec := chainSend(client, url, budget, critical, measured)
			if measured {
				mu.Lock()
				recs = append(recs, rec)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return recs, dropped
}

// chainSend makes one request of the class and budget and says what became of it.
func chainSend(c *http.Client, url string, budget time.Duration, critical, measured bool) chainRecord {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	path := "/sheddable/work"
	if critical {
		path = "/critical/work"
	}
	rec := chainRecord{critical: critical, measured: measured}
	resp, took, err := get(ctx, c, url+path, measured)
	rec.took = took
	switch {
	case err != nil && errors.Is(err, context.DeadlineExceeded), err == nil && rec.took > budget:
		rec.why = "client: no answer in time"
	case err != nil:
		rec.why = "client: error"
	case resp.StatusCode/100 == 2:
		rec.ok = true
	default:
		rec.why = fmt.Sprintf("client: %d", resp.StatusCode)
	}
	return rec
}

// chainFigure sums one run up; the critical requests' client-side fates go to lost.
func chainFigure(cfg ChainConfig, recs []chainRecord, dropped int, b *chainBackend, lost map[string]int) ChainFig {
	f := ChainFig{Dropped: dropped}
	var crit []time.Duration
	for _, r := range recs {
		f.Sent++
		if r.critical {
			f.Critical++
		}
		if !r.ok {
			if r.critical {
				lost[r.why]++
			}
			continue
		}
		f.OK++
		if r.critical {
			f.CriticalOK++
			crit = append(crit, r.took)
		}
	}
	if f.Critical > 0 {
		f.CriticalGoodput = float64(f.CriticalOK) / float64(f.Critical)
	}
	capacity := cfg.Capacity() * cfg.Duration.Seconds()
	f.TotalGoodput = float64(f.OK) / capacity
	slices.Sort(crit)
	f.CriticalP99 = pct(crit, 0.99)
	slotTime := float64(cfg.Workers) * float64(cfg.Duration)
	f.RefusalWork = float64(b.refused.Load()) / slotTime
	f.BusyWork = float64(b.busy.Load()) / slotTime
	return f
}
