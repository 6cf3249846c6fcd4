package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// The short-circuit scenario: A and B spend most of the client's budget (B works
// until 8 ms are left), so the request reaches C with a few ms, and C's handler
// needs 20 ms of work that does not watch its context (a CPU-bound step, a driver call
// without a context). Both runs propagate the deadline (B's client with no floor of its
// own, so that the request reaches C); the second adds C's guard with a 20 ms floor.
const (
	scBudget = 250 * time.Millisecond
	scWorkA  = 100 * time.Millisecond
	scLeftB  = 8 * time.Millisecond // B works until this much is left
	scWorkC  = 20 * time.Millisecond
	scFloor  = 20 * time.Millisecond
)

// cTiming is what C measured of the request: time from arrival to answer, and how long
// its handler ran.
type cTiming struct {
	mu      sync.Mutex
	total   time.Duration
	handler time.Duration
	ran     bool
	left    time.Duration
}

func runShortCircuit(e *env) ([]reading, error) {
	var runs [2]*cTiming
	for i, guarded := range []bool{false, true} {
		// On a very loaded machine the request can spend C's few milliseconds on
		// the way and never reach it: try again, a few times.
		var err error
		for try := 0; try < 3; try++ {
			if runs[i], err = runShortCircuitOnce(e, guarded); err == nil {
				break
			}
		}
		if err != nil {
			return nil, err
		}
	}
	handler := func(c *cTiming) string {
		if !c.ran {
			return "did not run"
		}
		return msPrecise(c.handler)
	}
	return []reading{
		{"short-circuit", "C's answer to a request arriving with " + ms(runs[1].left) + " left", "after " + msPrecise(runs[0].total), fmt.Sprintf("refused after %v", runs[1].total.Round(time.Microsecond))},
		{"", "C's handler time on it (floor " + ms(scFloor) + ")", handler(runs[0]), handler(runs[1])},
	}, nil
}

func runShortCircuitOnce(e *env, guarded bool) (*cTiming, error) {
	ct := &cTiming{}
	sleep := func(ctx context.Context, d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	spec := chainSpec{
		a: func(ctx context.Context, next func(context.Context) error) error {
			if err := sleep(ctx, scWorkA); err != nil {
				return err
			}
			return next(ctx)
		},
		b: func(ctx context.Context, next func(context.Context) error) error {
			left, _ := deadline.Remaining(ctx)
			if err := sleep(ctx, left-scLeftB); err != nil {
				return err
			}
			return next(ctx)
		},
		c: func(ctx context.Context, _ func(context.Context) error) error {
			start := time.Now()
			time.Sleep(scWorkC) //deadlinevet:detached work that does not watch ctx, to show what the guard saves
			ct.mu.Lock()
			ct.handler, ct.ran = time.Since(start), true
			ct.mu.Unlock()
			return ctx.Err() // 504 when the deadline passed during the work
		},
		serverA:   propagate.NewMiddleware(),
		clientToA: propagateTransport,
		// B's client would not send a request with less than 20 ms to give
		// (propagate's floor, deadline.DefaultFloor): here it sends whatever is
		// left, to show what C does with it.
		bToC: func(rt http.RoundTripper) http.RoundTripper {
			return propagate.NewTransport(rt, propagate.WithFloor(0))
		},
	}
	spec.serverB = append(spec.serverB, propagate.UnaryServerInterceptor())
	spec.aToB = append(spec.aToB, propagate.UnaryClientInterceptor())
	guard := func(h http.Handler) http.Handler { return h }
	if guarded {
		guard = shortcircuit.NewMiddleware(shortcircuit.WithFloor(scFloor))
	}
	prop := propagate.NewMiddleware()
	// C measures itself from arrival (outside the toolkit) to its answer.
	spec.serverC = func(h http.Handler) http.Handler {
		inner := prop(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if dl, ok := r.Context().Deadline(); ok {
				ct.mu.Lock()
				ct.left = time.Until(dl)
				ct.mu.Unlock()
			}
			guard(h).ServeHTTP(w, r)
		}))
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			inner.ServeHTTP(w, r)
			ct.mu.Lock()
			ct.total = time.Since(start)
			ct.mu.Unlock()
		})
	}
	ch, err := startChain(e.tel, spec)
	if err != nil {
		return nil, err
	}
	defer ch.stop()
	title, variant := "short-circuit: C without a guard", "no guard at C"
	if guarded {
		title, variant = "short-circuit: C guarded", "C guarded, floor "+ms(scFloor)
	}
	ctx, root := e.tel.root(context.Background(), "short-circuit, "+variant)
	e.trace(title, root)
	ctx, cancel := context.WithTimeout(ctx, scBudget)
	defer cancel()
	err = ch.call(ctx)
	root.SetName("short-circuit, " + variant + ": the client " + clientSaw(err))
	root.End()
	fmt.Fprintf(e.verbose, "  %s: client got %v\n", title, err)
	ch.stop() // waits for C's handler to return
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.total == 0 {
		return nil, fmt.Errorf("%s: C never answered", title)
	}
	return ct, nil
}
