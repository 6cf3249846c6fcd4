// Package testkit holds the helpers the toolkit's tests share across packages. Only
// tests import it.
package testkit

import (
	"net/http"
	"sync"
	"sync/atomic"
)

// RoundTripFunc adapts a function to an http.RoundTripper.
type RoundTripFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f(r).
func (f RoundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Parallel runs f(i) for i in [0, n) on workers goroutines, and returns when all
// have returned.
func Parallel(workers, n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				f(i)
			}
		})
	}
	wg.Wait()
}
