package hedgecmp

import (
	"net/http"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"

	"github.com/deadlinekit/deadlinekit/hedge"
)

// Oracle holds the true quantiles of the backend's distribution: the fixed delays
// of the oracle variants.
type Oracle struct{ P95, P99 time.Duration }

// SweepVariant is a contender of the seed sweep. Build returns its transport and,
// for deadlinekit's, the Hedger, whose delay the sweep traces.
type SweepVariant struct {
	Name  string
	Build func(base http.RoundTripper, o Oracle) (http.RoundTripper, *hedge.Hedger)
}

// fixed is a delay that never moves: the oracle's.
func fixed(d time.Duration) hedge.Delay {
	return hedge.Delay{Initial: d, Min: d, Max: d, MinSamples: 1 << 30}
}

// SweepVariants returns the contenders of the seed sweep, in the order they run for
// each seed.
func SweepVariants() []SweepVariant {
	withHedger := func(opts func(o Oracle) []hedge.Option) func(http.RoundTripper, Oracle) (http.RoundTripper, *hedge.Hedger) {
		return func(base http.RoundTripper, o Oracle) (http.RoundTripper, *hedge.Hedger) {
			h := hedge.New(opts(o)...)
			return h.Transport(base), h
		}
	}
	return []SweepVariant{
		{"deadlinekit P99", withHedger(func(Oracle) []hedge.Option { return nil })},
		{"failsafe-go quantile", func(base http.RoundTripper, _ Oracle) (http.RoundTripper, *hedge.Hedger) {
			p := hedgepolicy.NewBuilderWithDelayQuantile[*http.Response](0.99, 1000, 100).
				WithBudget(budget.NewBuilder().WithMaxRate(0.15).Build()).Build()
			return failsafehttp.NewRoundTripper(base, p), nil
		}},
		{"deadlinekit P99, cap 2%", withHedger(func(Oracle) []hedge.Option { return []hedge.Option{hedge.WithMaxExtraLoad(0.02)} })},
		{"oracle P99", withHedger(func(o Oracle) []hedge.Option { return []hedge.Option{hedge.WithDelay(fixed(o.P99))} })},
		{"deadlinekit extra load 1.5%", withHedger(func(Oracle) []hedge.Option { return []hedge.Option{hedge.WithExtraLoad(0.015)} })},
		{"deadlinekit extra load 5%", withHedger(func(Oracle) []hedge.Option { return []hedge.Option{hedge.WithExtraLoad(0.05)} })},
		{"oracle P95", withHedger(func(o Oracle) []hedge.Option { return []hedge.Option{hedge.WithDelay(fixed(o.P95))} })},
	}
}

// SweepRun is one run of the sweep.
type SweepRun struct {
	Seed    uint64
	Result  Result
	Hedges  uint64
	Wins    uint64
	Refused uint64
	// Trace is the Hedger's delay of the backend, read every TraceEvery (zero:
	// not hedged yet); empty for the peers.
	Trace []time.Duration
}

// TraceEvery is how often the sweep reads a Hedger's delay.
const TraceEvery = 100 * time.Millisecond

// RunOne runs variant v once against a fresh backend drawing from dist with seed.
func RunOne(v SweepVariant, dist Dist, o Oracle, seed uint64, cfg Config) (SweepRun, error) {
	b, err := NewBackend(dist, seed)
	if err != nil {
		return SweepRun{}, err
	}
	defer b.Close()
	rt, h := v.Build(NewBaseTransport(cfg.Concurrency), o)
	run := SweepRun{Seed: seed}
	done := make(chan struct{})
	var wg sync.WaitGroup
	if h != nil {
		host := b.URL[len("http://") : len(b.URL)-1]
		wg.Go(func() {
			tick := time.NewTicker(TraceEvery)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					d, _ := h.Delay(host)
					run.Trace = append(run.Trace, d)
				}
			}
		})
	}
	run.Result = Run(v.Name, rt, b, cfg)
	close(done)
	wg.Wait()
	if h != nil {
		s := h.Stats()
		run.Hedges, run.Wins, run.Refused = s.Hedges, s.HedgeWins, s.RefusedByCap
	}
	return run, nil
}
