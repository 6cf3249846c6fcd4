package testkit

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
)

// CutServer is a raw loopback server that reads each request's header and the first
// KiB of its body, then resets the connection without answering: a server that died
// (or was cut off) after the request reached it. Arrivals counts the requests whose
// header it read, that is, the ones whose handler may have run.
type CutServer struct {
	Arrivals atomic.Int32
	ln       net.Listener
	wg       sync.WaitGroup
}

// NewCutServer starts a CutServer, stopped when t ends.
func NewCutServer(t testing.TB) *CutServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &CutServer{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Go(func() { s.serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *CutServer) serve(c net.Conn) {
	defer c.Close()
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	s.Arrivals.Add(1)
	_, _ = io.CopyN(io.Discard, req.Body, 1<<10)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close with RST: the client's write of the rest fails
	}
}

// URL is the server's base URL.
func (s *CutServer) URL() string { return "http://" + s.ln.Addr().String() + "/" }
