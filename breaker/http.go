package breaker

import (
	"errors"
	"net/http"
)

// NewTransport returns an http.RoundTripper that breaks the circuit of each target
// (scheme, host and port) of the requests it sends through base (nil:
// http.DefaultTransport), with a [Breaker] of its own made from opts. Use [New] and
// [Breaker.Transport] to read the statistics or share the circuits with other
// adapters.
func NewTransport(base http.RoundTripper, opts ...Option) http.RoundTripper {
	return New(opts...).Transport(base)
}

// Transport returns an http.RoundTripper that sends requests through base (nil:
// http.DefaultTransport) while their target's circuit lets them, with b's circuits.
// A refused request is not sent: RoundTrip closes its body and returns an error that
// matches [ErrOpen] and carries the time until the next probe ([IsOpen] finds the
// [*OpenError]; http.Client wraps it in a *url.Error), and no response. The request is never modified. A call's time, for slow calls, is its time
// to the response's header.
func (b *Breaker) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{b: b, base: base}
}

type transport struct {
	b    *Breaker
	base http.RoundTripper
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	c := t.b.httpCircuit(req)
	if c == nil {
		return t.base.RoundTrip(req)
	}
	ctx := req.Context()
	var tk ticket
	if err := t.b.admit(ctx, c, &tk); err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		if lr, ok := err.(localRefusal); ok {
			err = lr.carried()
		}
		return nil, err
	}
	resp, err := t.base.RoundTrip(req)
	t.b.done(ctx, &tk, &Result{Method: req.Method, Err: err, Response: resp})
	return resp, err
}

// CloseIdleConnections closes the idle connections of the base transport, when it
// has any (http.Client.CloseIdleConnections calls it).
func (t *transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// IsOpen reports whether err is a refusal by an open circuit, and returns it.
func IsOpen(err error) (*OpenError, bool) {
	var oe *OpenError
	ok := errors.As(err, &oe)
	return oe, ok
}
