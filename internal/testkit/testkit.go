// Package testkit holds the helpers the toolkit's tests share across packages. Only
// tests import it.
package testkit

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"
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

// Span is what the attribute helpers read of a recorded span; the SDK's
// ReadOnlySpan has it, and this package need not import the SDK.
type Span interface {
	Name() string
	Attributes() []attribute.KeyValue
}

// Attrs returns s's attributes by key.
func Attrs(s Span) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// WantAttrs fails t for each of want that s does not carry with that value.
func WantAttrs(t testing.TB, s Span, want ...attribute.KeyValue) {
	t.Helper()
	got := Attrs(s)
	for _, kv := range want {
		if v, ok := got[kv.Key]; !ok || v != kv.Value {
			t.Errorf("span %q: %s = %s (present %v); want %s", s.Name(), kv.Key, v.String(), ok, kv.Value.String())
		}
	}
}

// ClosedAddr returns a loopback address ("127.0.0.1:port") nobody listens on: a
// dead downstream, whose dial is refused at once.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
