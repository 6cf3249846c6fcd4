package chaintest_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
)

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
		s := testkit.NewCutServer(t)
		base := &http.Transport{}
		client := &http.Client{Transport: deadlinekit.NewTransport(base)}
		var rd io.Reader = http.NoBody
		if c.body != nil {
			rd = bytes.NewReader(c.body)
		}
		req, _ := http.NewRequest(c.method, s.URL(), rd)
		if c.key != "" {
			req.Header.Set("Idempotency-Key", c.key)
		}
		resp, err := client.Do(req)
		base.CloseIdleConnections()
		if err == nil {
			resp.Body.Close()
			t.Fatalf("%s key=%q to a server that cuts the connection succeeded", c.method, c.key)
		}
		if got := s.Arrivals.Load(); got != c.want {
			t.Errorf("%s key=%q: the server got the request %d times; want %d (err %v)", c.method, c.key, got, c.want, err)
		}
	}
}
