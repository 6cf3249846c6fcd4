package deadlinekit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit"
)

// BenchmarkStackCodeHTTP is [BenchmarkStackCode] for [BenchmarkStackHTTP]'s call: the
// client's transports and the server's middleware of deadlinekit.NewTransport and
// NewHandler, of the floor of every promise ([BenchmarkStackFloorHTTP]'s fused-all)
// or of neither ("bare", the harness alone), joined in the process: the base
// transport hands the request to the server's handler under a context of its own, as
// net/http's server would, and answers with what the handler wrote. Untraced.
//
//	go test -run '^$' -bench StackCodeHTTP -count 5 .
func BenchmarkStackCodeHTTP(b *testing.B) {
	for _, v := range []struct {
		name   string
		client func(http.RoundTripper) http.RoundTripper
		server func(http.Handler) http.Handler
	}{
		{"bare", func(rt http.RoundTripper) http.RoundTripper { return rt }, func(h http.Handler) http.Handler { return h }},
		{"stack", func(rt http.RoundTripper) http.RoundTripper { return deadlinekit.NewTransport(rt) },
			func(h http.Handler) http.Handler { return deadlinekit.NewHandler(h) }},
		{"floor-all", func(rt http.RoundTripper) http.RoundTripper {
			return &floorTransport{c: newFloorAllClient(recordNone), base: rt}
		}, floorHandlerAll},
	} {
		b.Run(v.name, func(b *testing.B) {
			var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
			client := &http.Client{Transport: v.client(inProcessTransport{v.server(h)})}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			b.ReportAllocs()
			for b.Loop() {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://svc.test/item", nil)
				if err != nil {
					b.Fatal(err)
				}
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}

// inProcessTransport answers a request with its handler, in the process: the server
// side gets the request's header, not its context (net/http's server starts afresh).
type inProcessTransport struct{ h http.Handler }

func (t inProcessTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	sreq := req.Clone(context.Background()) //deadlinevet:detached the server side starts afresh, as net/http's does; its budget comes in the header
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, sreq)
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}
