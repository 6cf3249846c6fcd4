package hedgecmp

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Config bounds one run of one variant.
type Config struct {
	Calls       int           // calls to make (the run may stop earlier at MaxTime)
	Concurrency int           // calls in flight at once
	CallTimeout time.Duration // deadline of each call
	MaxTime     time.Duration // the run stops issuing calls after this long
	ShiftAt     int           // after this many calls have started, the backend turns 10× slower; 0: never
}

// Result is what one run measured.
type Result struct {
	Variant             string
	Calls, Errors       int
	P50, P99, P999, Max time.Duration
	Requests            int64 // reaching the backend
	CallsAfter          int   // calls started after the shift
	RequestsAfter       int64 // reaching the backend after the shift
	Elapsed             time.Duration
	Note                string
	// Latencies holds every call's latency, sorted (errors included, at the time
	// they took): the distribution the percentiles above are read from.
	Latencies []time.Duration
}

// ExtraLoad is backend requests / calls − 1.
func (r Result) ExtraLoad() float64 {
	if r.Calls == 0 {
		return 0
	}
	return float64(r.Requests)/float64(r.Calls) - 1
}

// ExtraLoadAfter is the extra load of the calls started after the shift.
func (r Result) ExtraLoadAfter() float64 {
	if r.CallsAfter == 0 {
		return 0
	}
	return float64(r.RequestsAfter)/float64(r.CallsAfter) - 1
}

// NewBaseTransport returns the transport every variant sends through: no proxy
// (loopback only), enough idle connections for the concurrency.
func NewBaseTransport(concurrency int) *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        4 * concurrency,
		MaxIdleConnsPerHost: 4 * concurrency,
		IdleConnTimeout:     30 * time.Second,
	}
}

// Run sends cfg.Calls GET requests to b through rt, cfg.Concurrency at a time, and
// measures them.
func Run(variant string, rt http.RoundTripper, b *Backend, cfg Config) Result {
	b.Reset()
	client := &http.Client{Transport: rt}
	lat := make([]time.Duration, 0, cfg.Calls)
	var mu sync.Mutex
	var errs, after int
	var started atomic.Int64
	stop := time.Now().Add(cfg.MaxTime)
	begin := time.Now()
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() {
			for {
				i := int(started.Add(1))
				if i > cfg.Calls || time.Now().After(stop) {
					return
				}
				shifted := cfg.ShiftAt > 0 && i > cfg.ShiftAt
				if shifted && i == cfg.ShiftAt+1 {
					b.Shift()
				}
				d, err := call(client, b.URL, cfg.CallTimeout, shifted)
				mu.Lock()
				lat = append(lat, d)
				if err != nil {
					errs++
				}
				if shifted {
					after++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	// Let losers still in flight reach the backend or be cancelled before counting.
	time.Sleep(100 * time.Millisecond)
	before, afterReq := b.Requests()
	slices.Sort(lat)
	r := Result{
		Variant: variant, Calls: len(lat), Errors: errs,
		P50: pct(lat, 0.5), P99: pct(lat, 0.99), P999: pct(lat, 0.999), Max: pct(lat, 1),
		Requests: before + afterReq, CallsAfter: after, RequestsAfter: afterReq, Elapsed: elapsed,
		Latencies: lat,
	}
	if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
	return r
}

func call(client *http.Client, url string, timeout time.Duration, after bool) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if after {
		req.Header.Set(PhaseHeader, "after")
	}
	resp, err := client.Do(req)
	if err != nil {
		return time.Since(start), err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return d, err
}

// pct is the nearest-rank percentile of sorted durations.
func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
