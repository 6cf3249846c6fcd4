package retry_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/retry"
)

// A RoundTripper returns the server's response for every status it got: a 503 whose
// Retry-After does not fit in the time left comes back as the response, its body and
// Retry-After intact, with a nil error; why the layer stopped is the last event's.
func TestStopReturnsTheResponse(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "come back in 5 s")
	}))
	defer srv.Close()
	var last retry.Event
	client := newClient(t, retry.WithBudget(nil), retry.WithObserver(func(_ context.Context, e retry.Event) { last = e }))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("err = %v; want the 503 response", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != "come back in 5 s" {
		t.Fatalf("body %q, %v; want the server's", body, err)
	}
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "5" {
		t.Fatalf("got %d, Retry-After %q; want 503, 5", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	var se *retry.StopError
	if last.Action != retry.Stop || !errors.As(last.Err, &se) || !se.Pushback || !errors.Is(last.Err, context.DeadlineExceeded) {
		t.Fatalf("last event %+v; want Stop with the deadline rule's StopError", last)
	}
	if ctx.Err() != nil {
		t.Fatalf("the call returned after its deadline; want at once")
	}
}

// The same holds when the retry budget has no token, and for a keyed POST's 409
// whose come-back does not fit.
func TestStopReturnsTheResponseBudgetAnd409(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{fn: always(503)}
		rt := retry.NewTransport(f, retry.WithBudget(retry.NewBudget(0, 0, 0)))
		req, _ := http.NewRequest("GET", "http://svc/", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil || resp == nil || resp.StatusCode != 503 || f.attempts() != 1 {
			t.Fatalf("budget empty: %v, %v after %d attempts; want the 503 after 1", resp, err, f.attempts())
		}
		if b, _ := io.ReadAll(resp.Body); string(b) != "body of Service Unavailable" {
			t.Fatalf("body %q", b)
		}
		resp.Body.Close()

		f = &fakeRT{fn: always(409, "Retry-After", "3")}
		rt = retry.NewTransport(f, retry.WithBudget(nil))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ = http.NewRequestWithContext(ctx, "POST", "http://svc/", strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", "k1")
		resp, err = rt.RoundTrip(req)
		if err != nil || resp == nil || resp.StatusCode != 409 || resp.Header.Get("Retry-After") != "3" {
			t.Fatalf("409: %v, %v; want the 409 with its Retry-After", resp, err)
		}
		resp.Body.Close()
	})
}

// A response that was to be retried is kept in memory, body and all, while the layer
// waits: when the caller's context ends during the wait, that response is returned.
func TestWaitEndedReturnsTheKeptResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var closed atomic.Int64
		f := &fakeRT{fn: func(int, *http.Request) (*http.Response, error) {
			r := httpStatus(503)
			r.Body = &closeCounter{ReadCloser: io.NopCloser(strings.NewReader("overloaded")), n: &closed}
			return r, nil
		}}
		rt := retry.NewTransport(f, retry.WithBudget(nil), retry.WithBackoff(retry.Backoff{Base: time.Second}))
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://svc/", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil || resp == nil || resp.StatusCode != 503 {
			t.Fatalf("got %v, %v; want the kept 503", resp, err)
		}
		if closed.Load() != 1 {
			t.Fatalf("the original body was closed %d times before the wait; want 1", closed.Load())
		}
		if b, _ := io.ReadAll(resp.Body); string(b) != "overloaded" {
			t.Fatalf("body %q; want the server's", b)
		}
		resp.Body.Close()
	})
}

// stallingBody answers nothing until it is closed.
type stallingBody struct{ done chan struct{} }

func (b *stallingBody) Read([]byte) (int, error) { <-b.done; return 0, io.ErrUnexpectedEOF }
func (b *stallingBody) Close() error {
	select {
	case <-b.done:
	default:
		close(b.done)
	}
	return nil
}

// When the response to be retried could not be kept (its body stalled past the
// bound, or its connection was cut) and the caller's context ends during the wait,
// the layer has no response to return: its error says that the answer was received
// and why it was not kept, so that the caller can tell it from an answer never
// received.
func TestWaitEndedSaysTheAnswerWasNotKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRT{fn: func(int, *http.Request) (*http.Response, error) {
			r := httpStatus(503)
			r.Body = &stallingBody{done: make(chan struct{})}
			return r, nil
		}}
		rt := retry.NewTransport(f, retry.WithBudget(nil), retry.WithBackoff(retry.Backoff{Base: time.Second}))
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(500*time.Millisecond, cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://svc/", nil)
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("got %v; want an error: the 503's body never came", resp)
		}
		var se *retry.StopError
		if !errors.As(err, &se) || !se.Unkept || !strings.Contains(err.Error(), "not kept") {
			t.Fatalf("err = %v; want a StopError saying the 503 received was not kept", err)
		}
		var status *retry.StatusError
		if !errors.As(err, &status) || status.StatusCode != 503 {
			t.Fatalf("err = %v; want it to wrap the 503's StatusError", err)
		}
	})
}
