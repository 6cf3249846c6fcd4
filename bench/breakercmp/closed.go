package breakercmp

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit"
)

// noop is a RoundTripper that answers 200 at once without allocating: it hands out
// its one response, reset at each call (callers use it one at a time).
type noop struct{ resp http.Response }

func (n *noop) RoundTrip(req *http.Request) (*http.Response, error) {
	n.resp = http.Response{StatusCode: http.StatusOK, Status: "200 OK", Body: http.NoBody, Request: req,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	return &n.resp, nil
}

// ClosedPath is one transport whose closed path is measured.
type ClosedPath struct {
	Name string
	New  func(base http.RoundTripper) http.RoundTripper
}

// ClosedPaths returns the transports measured by [BenchClosed]: no breaker, each
// variant's breaker, and deadlinekit's client stack with and without its breaker.
func ClosedPaths() []ClosedPath {
	ps := []ClosedPath{{Name: "no breaker (the no-op base alone)", New: func(base http.RoundTripper) http.RoundTripper { return base }}}
	for _, v := range Variants() {
		ps = append(ps, ClosedPath{Name: v.Name, New: func(base http.RoundTripper) http.RoundTripper { return v.New(base, "127.0.0.1:1").RT }})
	}
	ps = append(ps,
		ClosedPath{Name: "deadlinekit.NewTransport (retry → breaker → hedge → propagate)", New: func(base http.RoundTripper) http.RoundTripper {
			return deadlinekit.NewTransport(base)
		}},
		ClosedPath{Name: "deadlinekit.NewTransport, Without(Breaker)", New: func(base http.RoundTripper) http.RoundTripper {
			return deadlinekit.NewTransport(base, deadlinekit.Without(deadlinekit.Breaker))
		}},
	)
	return ps
}

// ClosedCall returns a function that makes one successful GET through p around a
// no-op base, with a 1 h budget on its context (a deadline, as real calls have), and
// closes the response's body, and the function that releases the context. It is for
// one goroutine at a time.
func ClosedCall(p ClosedPath) (call func() error, done func()) {
	rt := p.New(&noop{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:1/work", nil)
	if err != nil {
		panic(err) // a constant URL
	}
	return func() error {
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}, cancel
}

// BenchClosed measures [ClosedCall]'s call.
func BenchClosed(b *testing.B, p ClosedPath) {
	call, done := ClosedCall(p)
	defer done()
	b.ReportAllocs()
	for b.Loop() {
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
}
