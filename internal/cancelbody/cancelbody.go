// Package cancelbody ties a context to the life of an HTTP response body. A layer
// that runs a call under a context of its own (a shorter deadline, a per-attempt
// timeout, one attempt of a hedged call) cannot cancel that context when RoundTrip
// returns: the caller still has the body to read. The context must live until the
// body is closed or read to its end, and then be released.
package cancelbody

import (
	"context"
	"io"
)

// Body is a response body whose Close, or a Read that returns an error (io.EOF
// included), calls Cancel. Its zero value is not usable; Cancel may be called more
// than once, as a context.CancelFunc may.
type Body struct {
	io.ReadCloser
	Cancel context.CancelFunc
}

func (b *Body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.Cancel()
	}
	return n, err
}

func (b *Body) Close() error {
	err := b.ReadCloser.Close()
	b.Cancel()
	return err
}

// rwBody keeps the Write of a body that has one: the body of a 101 Switching
// Protocols response is an io.ReadWriteCloser, and callers type-assert it.
type rwBody struct {
	Body
	w io.Writer
}

func (b *rwBody) Write(p []byte) (int, error) { return b.w.Write(p) }

// Wrap returns body tied to cancel, keeping its Write when it has one.
func Wrap(body io.ReadCloser, cancel context.CancelFunc) io.ReadCloser {
	if w, ok := body.(io.Writer); ok {
		return &rwBody{Body: Body{ReadCloser: body, Cancel: cancel}, w: w}
	}
	return &Body{ReadCloser: body, Cancel: cancel}
}
