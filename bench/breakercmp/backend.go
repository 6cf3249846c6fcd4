package breakercmp

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"
)

// backend is one variant's downstream on 127.0.0.1: healthy, it answers 200 after
// its delay (or when the caller gives up first); down, it answers 503 at once.
type backend struct {
	srv   *httptest.Server
	delay atomic.Int64 // time.Duration
	down  atomic.Bool
	// hits counts the requests that reached the handler; downHits those of them
	// that arrived while it was down; served the 200 answers written.
	hits, downHits, served atomic.Int64
}

func newBackend(delay time.Duration) *backend {
	b := &backend{}
	b.delay.Store(int64(delay))
	b.srv = httptest.NewServer(http.HandlerFunc(b.serve))
	return b
}

func (b *backend) serve(w http.ResponseWriter, r *http.Request) {
	b.hits.Add(1)
	if b.down.Load() {
		b.downHits.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	t := time.NewTimer(time.Duration(b.delay.Load()))
	defer t.Stop()
	select {
	case <-t.C:
		b.served.Add(1)
		w.WriteHeader(http.StatusOK)
	case <-r.Context().Done():
	}
}

func (b *backend) close() {
	b.srv.CloseClientConnections()
	b.srv.Close()
}

// host is the backend's host:port.
func (b *backend) host() string { return b.srv.Listener.Addr().String() }
