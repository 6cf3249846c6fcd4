package hedge_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// sleep waits d or until ctx ends, like a transport honouring its request's context.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// attemptOf is the attempt number a request carries (0: the primary).
func attemptOf(r *http.Request) int {
	n, _ := strconv.Atoi(r.Header.Get("Grpc-Previous-Rpc-Attempts"))
	return n
}

// trackedBody records whether it was read to the end and closed.
type trackedBody struct {
	io.Reader
	closed, drained atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if err == io.EOF {
		b.drained.Store(true)
	}
	return n, err
}

func (b *trackedBody) Close() error { b.closed.Store(true); return nil }

func response(r *http.Request, code int, body io.ReadCloser) *http.Response {
	if body == nil {
		body = io.NopCloser(strings.NewReader("attempt " + strconv.Itoa(attemptOf(r))))
	}
	return &http.Response{StatusCode: code, Body: body, Header: http.Header{}, Request: r}
}

// latencyBackend is a fake transport whose answer time is chosen per request by
// latency(attempt number, arrival number); it counts what reaches it.
type latencyBackend struct {
	latency func(attempt, arrival int) time.Duration
	n       atomic.Int64 // requests received
	hedges  atomic.Int64 // of which hedges
	cut     atomic.Int64 // requests whose context ended before they answered
}

func (b *latencyBackend) RoundTrip(r *http.Request) (*http.Response, error) {
	arrival := int(b.n.Add(1))
	a := attemptOf(r)
	if a > 0 {
		b.hedges.Add(1)
	}
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	if err := sleep(r.Context(), b.latency(a, arrival)); err != nil {
		b.cut.Add(1)
		return nil, err
	}
	return response(r, 200, nil), nil
}

// get sends a GET through rt and reads the body; it returns the body text or the
// error's text.
func get(ctx context.Context, rt http.RoundTripper) string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://backend.test/x", nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

var netOpError = net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
