package hedge_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
)

// TestObservers: each WithObserver adds an observer; all of them see every call, in
// the order they were given, whether the call was hedged or passed through.
func TestObservers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen []string
		observer := func(name string) hedge.Option {
			return hedge.WithObserver(func(_ context.Context, e hedge.Event) {
				seen = append(seen, name+" "+e.Target)
			})
		}
		b := &latencyBackend{latency: func(a, _ int) time.Duration {
			if a > 0 {
				return time.Millisecond
			}
			return time.Second
		}}
		rt := hedge.NewTransport(b, observer("first"), hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}), observer("second"))
		if got := get(t.Context(), rt); got != "attempt 1" {
			t.Errorf("hedged call: %q; want the hedge's answer", got)
		}
		post, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://other.test/x", nil)
		if resp, err := rt.RoundTrip(post); err != nil {
			t.Errorf("POST: %v", err)
		} else {
			resp.Body.Close()
		}
		ic := hedge.UnaryClientInterceptor(observer("first"), observer("second"))
		reply := &wrapperspb.StringValue{}
		if err := ic(t.Context(), methodGet, &wrapperspb.StringValue{}, reply, nil, (&fakeInvoker{latency: func(int) (time.Duration, error) { return 0, nil }}).invoke); err != nil {
			t.Errorf("gRPC call: %v", err)
		}
		synctest.Wait()
		want := []string{"first " + target, "second " + target, "first other.test", "second other.test", "first " + methodGet, "second " + methodGet}
		if strings.Join(seen, ", ") != strings.Join(want, ", ") {
			t.Errorf("observers saw %q; want %q", seen, want)
		}
	})
}

// TestObserverPanic: an observer runs on the caller's goroutine, and its panic is
// the caller's: it goes through unchanged, the observers after it are not called,
// and the response nobody will get is closed.
func TestObserverPanic(t *testing.T) {
	type boom struct{}
	panicking := hedge.WithObserver(func(context.Context, hedge.Event) { panic(boom{}) })
	called := false
	after := hedge.WithObserver(func(context.Context, hedge.Event) { called = true })
	recovered := func(f func()) (got any) {
		defer func() { got = recover() }()
		f()
		return nil
	}
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			opts  []hedge.Option
			delay time.Duration // of the primary; hedges answer at once
		}{
			{"not hedged", nil, 0},
			{"armed, not due", []hedge.Option{hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond})}, 0},
			{"hedged", []hedge.Option{hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond})}, time.Second},
		} {
			called = false
			body := &trackedBody{Reader: strings.NewReader("answer")}
			rt := hedge.NewTransport(testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
				if attemptOf(r) == 0 {
					if err := sleep(r.Context(), tc.delay); err != nil {
						return nil, err
					}
				}
				return response(r, 200, body), nil
			}), append(tc.opts, panicking, after)...)
			got := recovered(func() { get(t.Context(), rt) })
			synctest.Wait()
			if got != any(boom{}) || called {
				t.Errorf("%s: recovered %#v, next observer called %v; want the observer's panic, and no further observer", tc.name, got, called)
			}
			if !body.closed.Load() {
				t.Errorf("%s: the answer's body was not closed", tc.name)
			}
		}

		ic := hedge.UnaryClientInterceptor(hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond}), panicking)
		got := recovered(func() {
			_ = ic(t.Context(), methodGet, &wrapperspb.StringValue{}, &wrapperspb.StringValue{}, nil,
				(&fakeInvoker{latency: func(a int) (time.Duration, error) { return time.Duration(1-a) * time.Second, nil }}).invoke)
		})
		synctest.Wait()
		if got != any(boom{}) {
			t.Errorf("gRPC: recovered %#v; want the observer's panic", got)
		}
	})
}
