package shortcircuit_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// Open-loop overload on loopback: a handler with 4 slots (a resource it waits for,
// watching its context) × 10 ms of work serves 400 requests a second, behind a guard
// limited to those 4; the load is twice that, a request every 1.25 ms on average
// (Poisson arrivals, a seeded draw), whatever became of the ones before, for 1 s,
// each with a budget drawn from 50–150 ms, of which the server is told all but a
// reserve of 5 ms for the way back (what package propagate's client does). With the
// limit, the handler answers in time and the rest is refused at once; without it,
// requests wait for a slot until their deadline. The machine is shared and -race
// slows it: a few requests in a hundred may miss, where without the guard most do.
const (
	overloadReserve = 5 * time.Millisecond
	overloadSlots   = 4
	overloadWork    = 10 * time.Millisecond
	overloadRate    = 800 // per second: 2× the capacity
	overloadPeriod  = time.Second
)

// work holds one of the slots for overloadWork, giving up when ctx ends.
func work(ctx context.Context, slots chan struct{}) error {
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-slots }()
	t := time.NewTimer(overloadWork)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type outcome struct {
	ok, inTime bool
	code       string
	took       time.Duration
}

// offer runs the open loop: send(ctx) makes one request, under ctx's budget.
func offer(t *testing.T, send func(ctx context.Context) (ok bool, code string)) []outcome {
	t.Helper()
	rng := rand.New(rand.NewPCG(16, 16))
	var mu sync.Mutex
	var out []outcome
	var wg sync.WaitGroup
	// The arrivals are a schedule of timers, drawn up front: each request starts at
	// its time whatever became of the others.
	for at := time.Duration(0); at < overloadPeriod; at += time.Duration(rng.ExpFloat64() / overloadRate * float64(time.Second)) {
		budget := time.Duration(50+rng.IntN(101)) * time.Millisecond
		wg.Add(1)
		time.AfterFunc(at, func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			t0 := time.Now()
			ok, code := send(ctx)
			took := time.Since(t0)
			mu.Lock()
			out = append(out, outcome{ok: ok, inTime: took < budget, code: code, took: took})
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

func checkOverload(t *testing.T, out []outcome, refusals map[string]bool) {
	t.Helper()
	var answered, late int
	var refusedTook []time.Duration
	codes := map[string]int{}
	for _, o := range out {
		codes[o.code]++
		switch {
		case o.ok && o.inTime:
			answered++
		case o.ok:
			late++
		case refusals[o.code] && o.inTime:
			refusedTook = append(refusedTook, o.took)
		default:
			t.Logf("a request ended with %s after %v, at its deadline or past it: left to time out", o.code, o.took)
		}
	}
	slices.Sort(refusedTook)
	median := time.Duration(0)
	if len(refusedTook) > 0 {
		median = refusedTook[len(refusedTook)/2]
	}
	t.Logf("%d requests offered: %d answered in time, %d late, %d refused (median %v); by code %v",
		len(out), answered, late, len(refusedTook), median, codes)
	if missed := len(out) - answered - len(refusedTook); missed > len(out)/20 {
		t.Errorf("%d requests of %d missed their deadline; the guard admitted what could not finish", missed, len(out))
	}
	// The capacity is 400 in the second; on a shared 2-core machine a third of it is
	// a safe floor for the goodput, where no guard gets next to none.
	if answered < int(overloadPeriod.Seconds()*overloadRate/2)/3 {
		t.Errorf("only %d answered in time", answered)
	}
	if len(refusedTook) == 0 {
		t.Error("nothing refused at twice the capacity")
	}
	if median > 20*time.Millisecond {
		t.Errorf("refusals took %v (median); want them fast", median)
	}
}

func TestHTTPOverloadLoopback(t *testing.T) {
	slots := make(chan struct{}, overloadSlots)
	h := budgetHeader(shortcircuit.NewMiddleware(shortcircuit.WithMaxConcurrency(overloadSlots))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if work(r.Context(), slots) != nil {
				w.WriteHeader(http.StatusGatewayTimeout)
				return
			}
			io.WriteString(w, "done")
		})))
	srv := httptest.NewServer(h)
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 1024}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	out := offer(t, func(ctx context.Context) (bool, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		d, _ := ctx.Deadline()
		req.Header.Set("X-Test-Budget-Ms", strconv.Itoa(int((time.Until(d)-overloadReserve)/time.Millisecond)))
		resp, err := client.Do(req)
		if err != nil {
			return false, "error"
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprint(resp.StatusCode)
	})
	checkOverload(t, out, map[string]bool{"503": true, "504": true})
}

func TestGRPCOverloadLoopback(t *testing.T) {
	svc := &testService{unaryWork: work, slots: make(chan struct{}, overloadSlots)}
	client := startGRPC(t, svc, shortcircuit.WithMaxConcurrency(overloadSlots))
	out := offer(t, func(ctx context.Context) (bool, string) {
		d, _ := ctx.Deadline()
		ctx, cancel := context.WithDeadline(ctx, d.Add(-overloadReserve))
		defer cancel()
		_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
		if err == nil {
			return true, "OK"
		}
		return false, status.Code(err).String()
	})
	checkOverload(t, out, map[string]bool{codes.ResourceExhausted.String(): true, codes.DeadlineExceeded.String(): true})
}
