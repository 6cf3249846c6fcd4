package admissioncmp

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"
)

// A request that reaches the server while it closes (its caller gone, its stream
// already read) must not start a handler behind the wait for the handlers: the
// wait group would be reused while it is waited on, and the harness panics.
func TestCloseWhileRequestsArrive(t *testing.T) {
	for range 30 {
		s, err := newServer(Stops, Workers, time.Millisecond, Shape{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr := &http.Transport{Protocols: &p, Proxy: nil}
		client := &http.Client{Transport: tr}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		started := make(chan struct{}, 32)
		for range 32 {
			wg.Go(func() {
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url(), nil)
					if resp, err := client.Do(req); err == nil {
						resp.Body.Close()
					}
					select {
					case started <- struct{}{}:
					default:
					}
				}
			})
		}
		<-started
		s.close()
		cancel()
		wg.Wait()
		tr.CloseIdleConnections()
	}
}
