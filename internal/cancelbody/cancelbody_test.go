package cancelbody

import (
	"context"
	"io"
	"strings"
	"testing"
)

type rw struct {
	io.Reader
	wrote strings.Builder
}

func (r *rw) Write(p []byte) (int, error) { return r.wrote.Write(p) }
func (r *rw) Close() error                { return nil }

func TestCancelOnEOFAndClose(t *testing.T) {
	for _, tc := range []struct {
		name string
		use  func(io.ReadCloser)
	}{
		{"read to the end", func(b io.ReadCloser) { io.ReadAll(b) }},
		{"closed unread", func(b io.ReadCloser) { b.Close() }},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		b := Wrap(io.NopCloser(strings.NewReader("body")), cancel)
		if ctx.Err() != nil {
			t.Fatalf("%s: cancelled before use", tc.name)
		}
		tc.use(b)
		if ctx.Err() == nil {
			t.Errorf("%s: context still alive", tc.name)
		}
	}
}

func TestWrapKeepsWrite(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	inner := &rw{Reader: strings.NewReader("")}
	b := Wrap(inner, cancel)
	w, ok := b.(io.Writer)
	if !ok {
		t.Fatal("a body with Write lost it")
	}
	w.Write([]byte("hello"))
	if inner.wrote.String() != "hello" {
		t.Fatalf("wrote %q", inner.wrote.String())
	}
	b.Close()
	if ctx.Err() == nil {
		t.Fatal("context alive after Close")
	}
	if _, ok := Wrap(io.NopCloser(strings.NewReader("")), cancel).(io.Writer); ok {
		t.Fatal("a body without Write gained one")
	}
}
