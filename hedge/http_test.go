package hedge_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
)

const target = "backend.test"

// TestDelayEstimate: the delay is the window's P99 of the latencies seen, once the
// window holds enough samples; it leaves the window with time.
func TestDelayEstimate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Primary i takes (i%100 + 1) ms; hedges answer at once.
		b := &latencyBackend{latency: func(a, arrival int) time.Duration {
			if a > 0 {
				return 0
			}
			return time.Duration((arrival-1)%100+1) * time.Millisecond
		}}
		h := hedge.New()
		rt := h.Transport(b)
		for i := range 99 {
			get(t.Context(), rt)
			if _, ok := h.Delay(target); ok {
				t.Fatalf("delay known after %d samples, want %d", i+1, hedge.DefaultDelay.MinSamples)
			}
		}
		get(t.Context(), rt)
		d, ok := h.Delay(target)
		if !ok {
			t.Fatal("no delay after 100 samples")
		}
		if want := 99 * time.Millisecond; d < want*96/100 || d > want*104/100 {
			t.Errorf("delay = %v, want the P99, 99ms ±4%%", d)
		}
		if got := h.Delays(); got[target] != d || len(got) != 1 {
			t.Errorf("Delays() = %v", got)
		}
		if st := h.Stats(); st.Hedges != 0 || st.Primaries != 100 {
			t.Errorf("warm-up stats = %+v, want 100 primaries and no hedge", st)
		}

		// Another 100 calls: the slowest are now hedged.
		for range 100 {
			get(t.Context(), rt)
		}
		if st := h.Stats(); st.Hedges == 0 || st.Hedges > 5 || st.HedgeWins != st.Hedges {
			t.Errorf("stats = %+v, want a few hedges, all winning", st)
		}

		// The window is 30 s: after 31 s of silence it is empty again.
		time.Sleep(31 * time.Second)
		if d, ok := h.Delay(target); ok {
			t.Errorf("delay %v still known after the window passed", d)
		}
		if _, ok := h.Delay("other.test"); ok {
			t.Error("delay known for a target never called")
		}
	})
}

// TestWarmUp: before the minimum of samples no call is hedged, however slow; with an
// initial delay, calls are hedged from the first.
func TestWarmUp(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       []hedge.Option
		wantHedges uint64
	}{
		{"no initial delay", []hedge.Option{hedge.WithDelay(hedge.Delay{MinSamples: 20})}, 0},
		{"initial delay", []hedge.Option{hedge.WithDelay(hedge.Delay{MinSamples: 20, Initial: 10 * time.Millisecond})}, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &latencyBackend{latency: func(a, _ int) time.Duration {
					if a > 0 {
						return time.Millisecond
					}
					return time.Second
				}}
				var events []hedge.Event
				opts := append(tc.opts, hedge.WithObserver(func(_ context.Context, e hedge.Event) { events = append(events, e) }))
				h := hedge.New(opts...)
				rt := h.Transport(b)
				for range 10 {
					start := time.Now()
					get(t.Context(), rt)
					took := time.Since(start)
					if tc.wantHedges == 0 && took != time.Second {
						t.Errorf("call took %v, want 1s (not hedged)", took)
					}
					if tc.wantHedges > 0 && took != 11*time.Millisecond {
						t.Errorf("call took %v, want 11ms (hedged after 10ms)", took)
					}
				}
				if st := h.Stats(); st.Hedges != tc.wantHedges {
					t.Errorf("hedges = %d, want %d", st.Hedges, tc.wantHedges)
				}
				if len(events) != 10 {
					t.Fatalf("%d events, want 10", len(events))
				}
				e := events[0]
				if tc.wantHedges == 0 && (e.Attempts != 1 || e.Skipped != hedge.SkipWarmingUp) {
					t.Errorf("event = %+v, want 1 attempt, warming up", e)
				}
				if tc.wantHedges > 0 && (e.Attempts != 2 || e.Winner != 1 || e.Delay != 10*time.Millisecond || e.Target != target) {
					t.Errorf("event = %+v, want 2 attempts won by the hedge", e)
				}
			})
		})
	}
}

// TestLosersCanceled: when the hedge wins, the primary's context is cancelled and a
// response it still produced is drained and closed; when the primary wins, the hedge
// is cancelled. Nothing runs once the call is over.
func TestLosersCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}))
		// The primary ignores cancellation and answers at 15 ms with a body, after
		// the hedge (sent at 10 ms) answered at 11 ms.
		loserBody := &trackedBody{Reader: strings.NewReader("late")}
		var primaryCtxDone atomic.Bool
		rt := h.Transport(testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if attemptOf(r) == 0 {
				time.Sleep(15 * time.Millisecond)
				primaryCtxDone.Store(r.Context().Err() != nil)
				return response(r, 200, loserBody), nil
			}
			time.Sleep(time.Millisecond)
			return response(r, 200, nil), nil
		}))
		start := time.Now()
		if got := get(t.Context(), rt); got != "attempt 1" {
			t.Errorf("body = %q, want the hedge's", got)
		}
		// The primary runs on the caller's goroutine: a base transport that does
		// not honour cancellation holds the call until it returns.
		if took := time.Since(start); took != 15*time.Millisecond {
			t.Errorf("call took %v, want 15ms", took)
		}
		synctest.Wait()
		if !primaryCtxDone.Load() || !loserBody.closed.Load() || !loserBody.drained.Load() {
			t.Errorf("loser: cancelled %v, body drained %v, closed %v; want all true",
				primaryCtxDone.Load(), loserBody.drained.Load(), loserBody.closed.Load())
		}

		// The primary wins at 12 ms; the hedge, sent at 10 ms, is cut.
		b := &latencyBackend{latency: func(a, _ int) time.Duration {
			if a == 0 {
				return 12 * time.Millisecond
			}
			return time.Second
		}}
		h = hedge.New(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}))
		if got := get(t.Context(), h.Transport(b)); got != "attempt 0" {
			t.Errorf("body = %q, want the primary's", got)
		}
		synctest.Wait()
		if b.cut.Load() != 1 || b.hedges.Load() != 1 {
			t.Errorf("hedges %d, cut %d; want 1 and 1", b.hedges.Load(), b.cut.Load())
		}
		if st := h.Stats(); st.Hedges != 1 || st.HedgeWins != 0 {
			t.Errorf("stats = %+v", st)
		}
	})
}

// TestWinnerBodyKeepsContext: the winner's context lives until its body is closed.
func TestWinnerBodyKeepsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ctx context.Context
		rt := hedge.NewTransport(testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			ctx = r.Context()
			return response(r, 200, nil), nil
		}), hedge.WithDelay(hedge.Delay{Initial: time.Millisecond}))
		req, _ := http.NewRequest(http.MethodGet, "http://backend.test/", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatal("winner's context cancelled before its body was read")
		}
		resp.Body.Close()
		if ctx.Err() == nil {
			t.Fatal("winner's context not released by Close")
		}
	})
}

// TestReusedCallKeepsResponse: what the caller keeps of a call answered at once (its
// response, the body's hold on the primary's context, the request sent with the
// chain rule's mark) stays its own while the next calls run.
func TestReusedCallKeepsResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ctxs []context.Context
		n := 0
		rt := hedge.NewTransport(testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			ctxs = append(ctxs, r.Context())
			n++
			return response(r, 200, io.NopCloser(strings.NewReader(strings.Repeat("x", n)))), nil
		}), hedge.WithDelay(hedge.Delay{Initial: time.Millisecond}))
		var resps []*http.Response
		for range 3 {
			req, _ := http.NewRequest(http.MethodGet, "http://backend.test/", nil)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resps = append(resps, resp)
		}
		for i, resp := range resps {
			if got := resp.Request.Header.Get("Deadlinekit-Hedged-Above"); got != "1" {
				t.Errorf("call %d: its request's mark reads %q after the next calls; want 1", i, got)
			}
			if ctxs[i].Err() != nil {
				t.Errorf("call %d: context cancelled before its body was read", i)
			}
		}
		for i, resp := range resps {
			b, err := io.ReadAll(resp.Body)
			if err != nil || string(b) != strings.Repeat("x", i+1) {
				t.Errorf("call %d: body %q, %v; want %q", i, b, err, strings.Repeat("x", i+1))
			}
			resp.Body.Close()
			if ctxs[i].Err() == nil {
				t.Errorf("call %d: context not released by Close", i)
			}
			for j := i + 1; j < len(resps); j++ {
				if ctxs[j].Err() != nil {
					t.Errorf("closing call %d's body cancelled call %d", i, j)
				}
			}
		}
	})
}

// TestNonFatal: a primary answering 503 fires the hedge at once; another failure is
// returned without a hedge.
func TestNonFatal(t *testing.T) {
	for _, tc := range []struct {
		name       string
		primary    int
		hedge      int
		wantCode   int
		wantTook   time.Duration
		wantSent   int64
		wantClosed bool // the primary's body closed by the layer
	}{
		{"503 fires the hedge at once", 503, 200, 200, 2 * time.Millisecond, 2, true},
		{"503 twice returns the last", 503, 503, 503, 2 * time.Millisecond, 2, true},
		{"500 is returned", 500, 200, 500, time.Millisecond, 1, false},
		{"404 is returned", 404, 200, 404, time.Millisecond, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var sent atomic.Int64
				primaryBody := &trackedBody{Reader: strings.NewReader("primary")}
				h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: 50 * time.Millisecond}))
				rt := h.Transport(testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
					sent.Add(1)
					time.Sleep(time.Millisecond)
					if attemptOf(r) == 0 {
						return response(r, tc.primary, primaryBody), nil
					}
					return response(r, tc.hedge, nil), nil
				}))
				start := time.Now()
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://backend.test/", nil)
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				took := time.Since(start)
				synctest.Wait()
				if resp.StatusCode != tc.wantCode || took != tc.wantTook || sent.Load() != tc.wantSent {
					t.Errorf("got %d after %v with %d sent; want %d after %v with %d sent",
						resp.StatusCode, took, sent.Load(), tc.wantCode, tc.wantTook, tc.wantSent)
				}
				if primaryBody.closed.Load() != (tc.wantClosed || tc.primary != 503) {
					t.Errorf("primary body closed = %v", primaryBody.closed.Load())
				}
			})
		})
	}
}

// TestIdempotency: only idempotent requests with a replayable body are hedged; the
// others reach the backend once, however slow.
func TestIdempotency(t *testing.T) {
	body := func() io.Reader { return strings.NewReader("payload") }
	for _, tc := range []struct {
		name     string
		method   string
		body     io.Reader
		key      string
		noGet    bool // drop GetBody
		wantSent int64
		opts     []hedge.Option
	}{
		{"GET", http.MethodGet, nil, "", false, 2, nil},
		{"HEAD", http.MethodHead, nil, "", false, 2, nil},
		{"OPTIONS", http.MethodOptions, nil, "", false, 2, nil},
		{"TRACE", http.MethodTrace, nil, "", false, 2, nil},
		{"DELETE", http.MethodDelete, nil, "", false, 2, nil},
		{"PUT with replayable body", http.MethodPut, body(), "", false, 2, nil},
		{"PUT with one-shot body", http.MethodPut, body(), "", true, 1, nil},
		{"POST", http.MethodPost, body(), "", false, 1, nil},
		{"PATCH", http.MethodPatch, body(), "", false, 1, nil},
		{"POST with key", http.MethodPost, body(), "k-123", false, 1, nil},
		{"POST with key, WithKeyedWrites", http.MethodPost, body(), "k-123", false, 2, []hedge.Option{hedge.WithKeyedWrites()}},
		{"PATCH with key, WithKeyedWrites", http.MethodPatch, body(), "k-123", false, 2, []hedge.Option{hedge.WithKeyedWrites()}},
		{"POST with key, one-shot body, WithKeyedWrites", http.MethodPost, body(), "k-123", true, 1, []hedge.Option{hedge.WithKeyedWrites()}},
		{"PUT with key", http.MethodPut, body(), "k-123", false, 2, nil},
		{"POST with blank key", http.MethodPost, body(), " ", false, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var sent atomic.Int64
				var mu sync.Mutex
				var bodies []string
				h := hedge.New(append([]hedge.Option{hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond})}, tc.opts...)...)
				rt := h.Transport(testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
					sent.Add(1)
					if r.Body != nil {
						b, _ := io.ReadAll(r.Body)
						r.Body.Close()
						mu.Lock()
						bodies = append(bodies, string(b))
						mu.Unlock()
					}
					if err := sleep(r.Context(), time.Second/time.Duration(1+99*attemptOf(r))); err != nil {
						return nil, err
					}
					return response(r, 200, nil), nil
				}))
				req, _ := http.NewRequestWithContext(t.Context(), tc.method, "http://backend.test/", tc.body)
				if tc.key != "" {
					req.Header.Set("Idempotency-Key", tc.key)
				}
				if tc.noGet {
					req.GetBody = nil
				}
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				synctest.Wait()
				if sent.Load() != tc.wantSent {
					t.Errorf("%d requests reached the backend, want %d", sent.Load(), tc.wantSent)
				}
				for _, b := range bodies {
					if tc.body != nil && b != "payload" {
						t.Errorf("an attempt got body %q, want its own full copy", b)
					}
				}
				st := h.Stats()
				switch {
				case tc.wantSent == 2 && (st.Hedges != 1 || st.Primaries != 1):
					t.Errorf("stats = %+v, want 1 primary, 1 hedge", st)
				case tc.wantSent == 1 && tc.noGet && st.NotReplayable != 1:
					t.Errorf("stats = %+v, want NotReplayable 1", st)
				case tc.wantSent == 1 && tc.key == "k-123" && !tc.noGet && (st.KeyedWrites != 1 || st.NotIdempotent != 0):
					t.Errorf("stats = %+v, want KeyedWrites 1, NotIdempotent 0", st)
				case tc.wantSent == 1 && tc.key != "k-123" && !tc.noGet && st.NotIdempotent != 1:
					t.Errorf("stats = %+v, want NotIdempotent 1", st)
				}
			})
		})
	}
}

// TestCallerRequestUntouched: the hedge is a copy; the caller's request keeps its
// headers, context and body.
func TestCallerRequestUntouched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hedgeHeader http.Header
		rt := hedge.NewTransport(testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if attemptOf(r) > 0 {
				hedgeHeader = r.Header
				return response(r, 200, nil), nil
			}
			<-r.Context().Done()
			return nil, r.Context().Err()
		}), hedge.WithDelay(hedge.Delay{Initial: 5 * time.Millisecond}))
		ctx := t.Context()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://backend.test/", bytes.NewReader([]byte("x")))
		req.Header.Set("X-Caller", "kept")
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		synctest.Wait()
		if len(req.Header) != 1 || req.Header.Get("X-Caller") != "kept" || req.Context() != ctx {
			t.Errorf("caller's request changed: header %v", req.Header)
		}
		if hedgeHeader.Get("Grpc-Previous-Rpc-Attempts") != "1" || hedgeHeader.Get("X-Caller") != "kept" {
			t.Errorf("hedge header = %v, want the caller's plus Grpc-Previous-Rpc-Attempts: 1", hedgeHeader)
		}
	})
}

// TestFloor: no hedge when less than the floor is left before the deadline.
func TestFloor(t *testing.T) {
	for _, tc := range []struct {
		name       string
		budget     time.Duration
		wantHedges uint64
	}{
		{"enough time left", 100 * time.Millisecond, 1},
		{"below the floor at the delay", 25 * time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &latencyBackend{latency: func(a, _ int) time.Duration { return time.Second / time.Duration(1+999*a) }}
				h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}))
				ctx, cancel := context.WithTimeout(t.Context(), tc.budget)
				defer cancel()
				got := get(ctx, h.Transport(b))
				st := h.Stats()
				if st.Hedges != tc.wantHedges || st.RefusedByDeadline != 1-tc.wantHedges {
					t.Errorf("stats = %+v (answer %q)", st, got)
				}
				if tc.wantHedges == 0 && !strings.Contains(got, "deadline exceeded") {
					t.Errorf("answer %q, want the deadline error", got)
				}
			})
		})
	}
}

// TestCallerCancels: the call ends when the caller's context does, attempts with it.
func TestCallerCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &latencyBackend{latency: func(int, int) time.Duration { return time.Hour }}
		h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}))
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(50*time.Millisecond, cancel)
		got := get(ctx, h.Transport(b))
		synctest.Wait()
		if !strings.Contains(got, context.Canceled.Error()) || b.cut.Load() != 2 {
			t.Errorf("answer %q, %d attempts cut; want canceled, 2", got, b.cut.Load())
		}
	})
}

// TestPanicRecovered: a panic in an attempt becomes the call's error.
func TestPanicRecovered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := hedge.NewTransport(testkit.RoundTripFunc(func(*http.Request) (*http.Response, error) {
			panic("boom")
		}), hedge.WithDelay(hedge.Delay{Initial: time.Millisecond}))
		if got := get(t.Context(), rt); !strings.Contains(got, "panicked: boom") {
			t.Errorf("answer %q, want the panic as an error", got)
		}
	})
}

// TestMaxAttempts: with 3 attempts, a second hedge goes out one delay after the first.
func TestMaxAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &latencyBackend{latency: func(a, _ int) time.Duration {
			return []time.Duration{time.Second, time.Second, time.Millisecond}[a]
		}}
		h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}), hedge.WithMaxAttempts(3))
		start := time.Now()
		if got := get(t.Context(), h.Transport(b)); got != "attempt 2" {
			t.Errorf("answer %q", got)
		}
		if took := time.Since(start); took != 21*time.Millisecond {
			t.Errorf("took %v, want 21ms", took)
		}
		synctest.Wait()
		if st := h.Stats(); st.Hedges != 2 || b.cut.Load() != 2 {
			t.Errorf("stats %+v, cut %d", st, b.cut.Load())
		}
	})
}

// TestCapConcurrent: when every call is slow, hedges stay within the cap, with many
// calls in flight at once.
func TestCapConcurrent(t *testing.T) {
	for _, load := range []float64{0.15, 0.05} {
		synctest.Test(t, func(t *testing.T) {
			b := &latencyBackend{latency: func(int, int) time.Duration { return 100 * time.Millisecond }}
			h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}), hedge.WithMaxExtraLoad(load))
			rt := h.Transport(b)
			testkit.Parallel(64, 3000, func(int) { get(t.Context(), rt) })
			st := h.Stats()
			limit := uint64(load*float64(st.Primaries)) + hedge.Burst
			// Deposits made while the account is full are lost: at the start, 64
			// primaries pay into a full account.
			if st.Primaries != 3000 || st.Hedges > limit || st.Hedges < limit*9/10 {
				t.Errorf("load %v: stats %+v, want hedges at the cap %d", load, st, limit)
			}
			if got := b.n.Load(); got != int64(st.Primaries+st.Hedges) {
				t.Errorf("backend saw %d requests, stats say %d", got, st.Primaries+st.Hedges)
			}
		})
	}
}

// TestCapLatencyShift: the backend's latency has a heavy tail, then every request
// becomes ten times slower. Hedges stay at a few percent before the shift and within
// the cap after it, while the window learns the new latencies.
func TestCapLatencyShift(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var shifted atomic.Bool
		b := &latencyBackend{latency: func(_, arrival int) time.Duration {
			// A deterministic heavy tail: 98% 5 ms, 1.5% 50 ms, 0.5% 500 ms.
			d := 5 * time.Millisecond
			switch k := arrival * 7919 % 1000; {
			case k < 5:
				d = 500 * time.Millisecond
			case k < 20:
				d = 50 * time.Millisecond
			}
			if shifted.Load() {
				d *= 10
			}
			return d
		}}
		h := hedge.New()
		rt := h.Transport(b)
		testkit.Parallel(16, 4000, func(int) { get(t.Context(), rt) })
		before := h.Stats()
		if extra := float64(before.Hedges) / float64(before.Primaries); extra > 0.03 || before.Hedges == 0 {
			t.Errorf("before the shift: %+v, extra load %.3f; want a few percent", before, extra)
		}
		shifted.Store(true)
		testkit.Parallel(16, 4000, func(int) { get(t.Context(), rt) })
		after := h.Stats()
		hedges := after.Hedges - before.Hedges
		limit := uint64(0.15*4000) + hedge.Burst
		if hedges > limit {
			t.Errorf("after the shift: %d hedges for 4000 calls, cap %d", hedges, limit)
		}
		if after.RefusedByCap == 0 {
			t.Errorf("after the shift: %+v, want the cap to have refused hedges", after)
		}
		t.Logf("before: %d hedges / %d; after: %d hedges / 4000, %d refused; delay now %v",
			before.Hedges, before.Primaries, hedges, after.RefusedByCap, h.Delays()[target])
	})
}

// TestDialErrorFiresHedge: a refused connection is non-fatal, like UNAVAILABLE.
func TestDialErrorFiresHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: time.Second}))
		rt := h.Transport(testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if attemptOf(r) == 0 {
				return nil, &netOpError
			}
			return response(r, 200, nil), nil
		}))
		start := time.Now()
		if got := get(t.Context(), rt); got != "attempt 1" || time.Since(start) != 0 {
			t.Errorf("answer %q after %v", got, time.Since(start))
		}
	})
}

// TestGetBodyFails: a hedge that cannot replay the body is not sent, and leaves the
// call to the primary.
func TestGetBodyFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &latencyBackend{latency: func(int, int) time.Duration { return 50 * time.Millisecond }}
		h := hedge.New(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}))
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, "http://backend.test/", strings.NewReader("x"))
		req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("gone") }
		resp, err := h.Transport(b).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if b.n.Load() != 1 || h.Stats().Hedges != 0 {
			t.Errorf("%d requests, stats %+v; want the primary's answer", b.n.Load(), h.Stats())
		}
	})
}

// TestPreviousAttemptsHeaderAddsUp: beneath a retry layer, a hedge adds to the count
// the retry already wrote.
func TestPreviousAttemptsHeaderAddsUp(t *testing.T) {
	if sent := hedgeHTTPAttempts(t, "1"); len(sent) != 2 || sent[0] != "1" || sent[1] != "2" {
		t.Errorf("Grpc-Previous-Rpc-Attempts sent: %q, want the retry's 1 then 2", sent)
	}
}
