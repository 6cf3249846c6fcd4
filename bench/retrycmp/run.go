package retrycmp

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grace is how long a run waits, after its last user request returned, for calls
// still on their way to reach the bottom before it counts.
const grace = 50 * time.Millisecond

// warmupCalls are the healthy calls a per-request run makes first, so that the
// connections are up before anything is timed. They are not counted.
const warmupCalls = 3

// outcome is what the user saw of one request.
type outcome struct {
	took time.Duration
	code codes.Code
}

func (c *chain) call(id int, d time.Duration) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	_, err := c.user.UnaryCall(ctx, newRequest(id))
	return outcome{took: time.Since(start), code: status.Code(err)}
}

// OutageResult is what [RunOutage] measured: user requests made one after the other
// while the bottom service is down.
type OutageResult struct {
	Variant  string
	Requests int
	Deadline time.Duration
	// BottomCalls is the calls that reached the bottom for these requests; MinCalls
	// and MaxCalls are the fewest and most for one request.
	BottomCalls        int
	MinCalls, MaxCalls int
	// P50 and Max are the user's time to fail.
	P50, Max time.Duration
	// Codes counts the codes the user saw.
	Codes map[codes.Code]int
}

// PerRequest is the mean number of calls reaching the bottom per user request.
func (r OutageResult) PerRequest() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.BottomCalls) / float64(r.Requests)
}

// RunOutage builds a fresh chain for v, makes a few healthy calls, takes the bottom
// down and sends requests user requests one after the other, each with deadline d.
func RunOutage(v Variant, requests int, d time.Duration) (OutageResult, error) {
	c, err := newChain(v)
	if err != nil {
		return OutageResult{}, err
	}
	defer c.close()
	for i := range warmupCalls {
		if o := c.call(-1-i, 5*time.Second); o.code != codes.OK {
			return OutageResult{}, fmt.Errorf("%s: healthy call failed: %v", v.Name, o.code)
		}
	}
	c.bottom.down.Store(true)
	outs := make([]outcome, requests)
	for i := range requests {
		outs[i] = c.call(i, d)
	}
	time.Sleep(grace)
	r := OutageResult{Variant: v.Name, Requests: requests, Deadline: d, MinCalls: -1}
	for i := range requests {
		n := c.bottom.calls(i)
		r.BottomCalls += n
		if r.MinCalls < 0 || n < r.MinCalls {
			r.MinCalls = n
		}
		r.MaxCalls = max(r.MaxCalls, n)
	}
	r.P50, r.Max, r.Codes = summarize(outs)
	return r, nil
}

// SustainedConfig bounds a sustained-outage run: Warmup healthy user requests, then
// Outage user requests with the bottom down, both sent at Rate requests per second
// whatever the answers, each with deadline Deadline.
type SustainedConfig struct {
	Warmup, Outage int
	Rate           float64
	Deadline       time.Duration
}

// SustainedResult is what [RunSustained] measured.
type SustainedResult struct {
	Variant        string
	Warmup, Outage int
	WarmupErrors   int // healthy requests that failed (should be 0)
	OutageOK       int // outage requests that succeeded (should be 0)
	// BottomCalls is the calls that reached the bottom for the outage requests;
	// Reached is the outage requests that reached it at least once. The calls beyond
	// the first of each request are retries: BottomCalls − Reached.
	BottomCalls, Reached int
	// P50 and Max are the time to fail of the outage requests.
	P50, Max time.Duration
	Codes    map[codes.Code]int
	// OutageTime is how long the outage phase took, from its first request to its
	// last answer.
	OutageTime time.Duration
	// Bound is the variant's budget bound for these numbers, or -1 without one.
	Bound int
}

// Retries is the calls that reached the bottom beyond the first of each outage request.
func (r SustainedResult) Retries() int { return r.BottomCalls - r.Reached }

// ShareOfOutage is Retries as a share of the outage requests.
func (r SustainedResult) ShareOfOutage() float64 {
	if r.Outage == 0 {
		return 0
	}
	return float64(r.Retries()) / float64(r.Outage)
}

// ShareOfTraffic is Retries as a share of all user requests (warm-up and outage).
func (r SustainedResult) ShareOfTraffic() float64 {
	if r.Warmup+r.Outage == 0 {
		return 0
	}
	return float64(r.Retries()) / float64(r.Warmup+r.Outage)
}

// RunSustained builds a fresh chain for v, sends cfg.Warmup healthy requests at a
// steady rate, waits for their answers, takes the bottom down and sends cfg.Outage
// more at the same rate.
func RunSustained(v Variant, cfg SustainedConfig) (SustainedResult, error) {
	c, err := newChain(v)
	if err != nil {
		return SustainedResult{}, err
	}
	defer c.close()
	r := SustainedResult{Variant: v.Name, Warmup: cfg.Warmup, Outage: cfg.Outage, Bound: -1}
	for _, o := range c.steady(0, cfg.Warmup, cfg.Rate, cfg.Deadline) {
		if o.code != codes.OK {
			r.WarmupErrors++
		}
	}
	c.bottom.down.Store(true)
	start := time.Now()
	outs := c.steady(cfg.Warmup, cfg.Outage, cfg.Rate, cfg.Deadline)
	r.OutageTime = time.Since(start)
	time.Sleep(grace)
	for i, o := range outs {
		if o.code == codes.OK {
			r.OutageOK++
		}
		n := c.bottom.calls(cfg.Warmup + i)
		r.BottomCalls += n
		if n > 0 {
			r.Reached++
		}
	}
	r.P50, r.Max, r.Codes = summarize(outs)
	if v.Bound != nil {
		r.Bound = v.Bound(cfg.Warmup - r.WarmupErrors)
	}
	return r, nil
}

// steady sends n requests numbered first, first+1, … at rate per second, each on its
// own goroutine, and returns their outcomes once all have returned.
func (c *chain) steady(first, n int, rate float64, d time.Duration) []outcome {
	outs := make([]outcome, n)
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		if w := time.Until(start.Add(time.Duration(i) * interval)); w > 0 {
			time.Sleep(w)
		}
		wg.Go(func() { outs[i] = c.call(first+i, d) })
	}
	wg.Wait()
	return outs
}

func summarize(outs []outcome) (p50, mx time.Duration, cs map[codes.Code]int) {
	lat := make([]time.Duration, len(outs))
	cs = map[codes.Code]int{}
	for i, o := range outs {
		lat[i] = o.took
		cs[o.code]++
	}
	slices.Sort(lat)
	return pct(lat, 0.5), pct(lat, 1), cs
}

// pct is the nearest-rank percentile of sorted durations.
func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// FormatCodes writes a code count as "Unavailable ×9, DeadlineExceeded ×1", most
// frequent first.
func FormatCodes(cs map[codes.Code]int) string {
	keys := slices.SortedFunc(maps.Keys(cs), func(a, b codes.Code) int {
		if cs[a] != cs[b] {
			return cs[b] - cs[a]
		}
		return int(a) - int(b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%v ×%d", k, cs[k])
	}
	return strings.Join(parts, ", ")
}
