package retry_test

import (
	"net/http"
	"testing"
	"testing/synctest"

	"github.com/deadlinekit/deadlinekit/retry"
)

// stalledBody is a response body that sends nothing until it is closed, and whose
// Close panics once it has let the reader go.
type stalledBody struct{ closed chan struct{} }

func (b *stalledBody) Read([]byte) (int, error) {
	<-b.closed
	return 0, http.ErrBodyReadAfterClose
}

func (b *stalledBody) Close() error {
	close(b.closed)
	panic("Close")
}

// The body of a retried answer that stalls is closed by a timer, on a goroutine of
// the layer's own: a panic there would end the process, so it is recovered, and the
// retry goes ahead.
func TestDrainedBodyCloseThatPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{fn: func(n int, _ *http.Request) (*http.Response, error) {
			if n == 1 {
				return &http.Response{StatusCode: 503, Header: http.Header{}, Body: &stalledBody{closed: make(chan struct{})}}, nil
			}
			return httpStatus(200), nil
		}}
		req, _ := http.NewRequest("GET", "http://svc/", nil)
		resp, err := retry.NewTransport(f, retry.WithBudget(nil)).RoundTrip(req)
		if err != nil || resp.StatusCode != 200 || f.attempts() != 2 {
			t.Fatalf("got %v, %v after %d attempts; want the retry's 200", resp, err, f.attempts())
		}
		resp.Body.Close()
	})
}
