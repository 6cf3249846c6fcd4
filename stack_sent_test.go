package deadlinekit_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/deadlinekit/deadlinekit"
)

// cutServer is a raw loopback server that reads each request's header and the first
// KiB of its body, then resets the connection without answering. It counts the
// requests whose header it read: the ones whose handler may have run.
type cutServer struct {
	ln       net.Listener
	arrivals atomic.Int32
	wg       sync.WaitGroup
}

func newCutServer(t *testing.T) *cutServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &cutServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *cutServer) serve(c net.Conn) {
	defer c.Close()
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	s.arrivals.Add(1)
	io.CopyN(io.Discard, req.Body, 1<<10)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0) // close with RST: the client's write of the rest fails
	}
}

// Through the stack's client, a POST without an Idempotency-Key that reached the
// server (its header and part of its body) before the connection was cut is sent
// once, as net/http alone sends it; a GET and a keyed POST are retried (the
// stack's default: 3 attempts).
func TestStackCutWhileSendingBodyNotResent(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 8<<20) // far more than the socket buffers hold
	cases := []struct {
		method, key string
		body        []byte
		want        int32
	}{
		{"POST", "", body, 1},
		{"POST", "k1", body, 3},
		{"GET", "", nil, 3},
	}
	for _, c := range cases {
		s := newCutServer(t)
		base := &http.Transport{}
		client := &http.Client{Transport: deadlinekit.NewTransport(base)}
		var rd io.Reader = http.NoBody
		if c.body != nil {
			rd = bytes.NewReader(c.body)
		}
		req, _ := http.NewRequest(c.method, "http://"+s.ln.Addr().String()+"/", rd)
		if c.key != "" {
			req.Header.Set("Idempotency-Key", c.key)
		}
		resp, err := client.Do(req)
		base.CloseIdleConnections()
		if err == nil {
			resp.Body.Close()
			t.Fatalf("%s key=%q to a server that cuts the connection succeeded", c.method, c.key)
		}
		if got := s.arrivals.Load(); got != c.want {
			t.Errorf("%s key=%q: the server got the request %d times; want %d (err %v)", c.method, c.key, got, c.want, err)
		}
	}
}
