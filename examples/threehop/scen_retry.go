package main

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
)

// The retry-amplification scenario: C is down (every request answered 503). Without
// the toolkit, every layer (client, A, B) retries 3 times, at once: 3 × 3 × 3 calls
// reach C per user request. With it, every layer uses package retry: B retries C
// (backoff, budget), gives up, and tells A so (grpc-retry-pushback-ms: -1), and A and
// the client do not retry what was already retried: one layer retries.
const (
	retryRequests = 4
	retryBudget   = time.Second
	naiveAttempts = 3
)

func runRetry(e *env) ([]reading, error) {
	type result struct {
		perRequest float64
		timeToFail time.Duration
	}
	var res [2]result
	for i, withToolkit := range []bool{false, true} {
		calls, took, err := runRetryOnce(e, withToolkit)
		if err != nil {
			return nil, err
		}
		res[i] = result{float64(calls) / retryRequests, took / retryRequests}
	}
	per := func(r result) string { return fmt.Sprintf("%.1f", r.perRequest) }
	return []reading{
		{"retry amplification", "calls reaching C per user request, C down", per(res[0]), per(res[1])},
		{"", "time until the user sees the failure", msPrecise(res[0].timeToFail), msPrecise(res[1].timeToFail)},
	}, nil
}

// naive retries f up to naiveAttempts times, at once: what each layer does without
// the toolkit.
func naive(f func() error) error {
	var err error
	for range naiveAttempts {
		if err = f(); err == nil {
			return nil
		}
	}
	return err
}

func runRetryOnce(e *env, withToolkit bool) (calls int64, took time.Duration, err error) {
	var reachedC atomic.Int64
	pass := func(ctx context.Context, next func(context.Context) error) error {
		if !withToolkit {
			return naive(func() error { return next(ctx) })
		}
		return next(ctx)
	}
	spec := chainSpec{
		a: pass,
		b: pass,
		c: func(ctx context.Context, _ func(context.Context) error) error {
			reachedC.Add(1)
			return &deadlinekit.WireError{HTTPStatus: http.StatusServiceUnavailable, Message: "C is down"}
		},
	}
	if withToolkit {
		retryHTTP := func(rt http.RoundTripper) http.RoundTripper {
			return retry.NewTransport(propagate.NewTransport(rt))
		}
		spec.clientToA, spec.bToC = retryHTTP, retryHTTP
		spec.aToB = []grpc.UnaryClientInterceptor{retry.UnaryClientInterceptor(), propagate.UnaryClientInterceptor()}
		server := func(h http.Handler) http.Handler { return propagate.NewMiddleware()(retry.NewMiddleware()(h)) }
		spec.serverA, spec.serverC = server, server
		spec.serverB = []grpc.UnaryServerInterceptor{propagate.UnaryServerInterceptor(), retry.UnaryServerInterceptor()}
	}
	ch, err := startChain(e.tel, spec)
	if err != nil {
		return 0, 0, err
	}
	defer ch.stop()
	title, variant := "retry: C down, every layer retrying 3 times", "every layer retrying 3 times"
	if withToolkit {
		title, variant = "retry: C down, package retry on every layer", "package retry on every layer"
	}
	for i := range retryRequests {
		ctx, root := e.tel.root(context.Background(), "retry, C down, "+variant)
		if i == 0 {
			e.trace(title, root)
		}
		ctx, cancel := context.WithTimeout(ctx, retryBudget)
		before := reachedC.Load()
		start := time.Now()
		call := func() error { return ch.call(ctx) }
		if !withToolkit {
			err = naive(call)
		} else {
			err = call()
		}
		took += time.Since(start)
		cancel()
		reached := reachedC.Load() - before
		root.SetName(fmt.Sprintf("retry, C down, %s: the client %s, %d %s reached C", variant, clientSaw(err), reached, plural(reached, "call", "calls")))
		root.End()
		fmt.Fprintf(e.verbose, "  %s: request %d: %d calls reached C, user got %v\n", title, i+1, reached, err)
		if err == nil {
			return 0, 0, fmt.Errorf("%s: the request succeeded with C down", title)
		}
	}
	return reachedC.Load(), took, nil
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
