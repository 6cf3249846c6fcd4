package retry_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/retry"
)

// A classifier sees each attempt with the layer's own verdict, and may change it.
func TestClassifierHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen []retry.Event
		// The application knows its POST /orders is safe to resend after a 500.
		classify := retry.WithClassifier(func(e retry.Event) retry.Verdict {
			seen = append(seen, e)
			var se *retry.StatusError
			if errors.As(e.Err, &se) && se.StatusCode == 500 && se.Header.Get("X-Safe") == "1" {
				return retry.Retryable
			}
			return e.Verdict
		})
		f := &fakeRT{fn: func(n int, _ *http.Request) (*http.Response, error) {
			if n == 1 {
				return httpStatus(500, "X-Safe", "1"), nil
			}
			return httpStatus(201), nil
		}}
		req, _ := http.NewRequest("POST", "http://svc/orders", strings.NewReader("order"))
		resp, err := retry.NewTransport(f, retry.WithBudget(nil), classify).RoundTrip(req)
		if err != nil || resp.StatusCode != 201 || f.attempts() != 2 {
			t.Fatalf("got %v, %v after %d attempts; want 201 after 2", resp, err, f.attempts())
		}
		resp.Body.Close()
		if len(seen) != 2 || seen[0].Verdict != retry.Failed || seen[0].Method != "POST" || seen[0].Idempotent ||
			seen[0].Attempt != 1 || seen[1].Verdict != retry.Answered || seen[1].Err != nil {
			t.Fatalf("the classifier saw %+v", seen)
		}

		// And the other way: a 503 the application does not want retried.
		never := retry.WithClassifier(func(retry.Event) retry.Verdict { return retry.Failed })
		f = &fakeRT{fn: always(503)}
		req, _ = http.NewRequest("GET", "http://svc/", nil)
		resp, err = retry.NewTransport(f, retry.WithBudget(nil), never).RoundTrip(req)
		if err != nil || resp.StatusCode != 503 || f.attempts() != 1 {
			t.Fatalf("got %v, %v after %d attempts; want the 503 after 1", resp, err, f.attempts())
		}
		resp.Body.Close()
	})
}

func TestClassifierGRPC(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
			if calls++; calls == 1 {
				return status.Error(codes.Internal, "flaky")
			}
			return nil
		}
		var first retry.Event
		classify := retry.WithClassifier(func(e retry.Event) retry.Verdict {
			if e.Attempt == 1 {
				first = e
			}
			if status.Code(e.Err) == codes.Internal {
				return retry.Retryable
			}
			return e.Verdict
		})
		err := retry.UnaryClientInterceptor(retry.WithBudget(nil), classify)(context.Background(), "/svc/M", nil, nil, nil, invoker)
		if err != nil || calls != 2 {
			t.Fatalf("%v after %d calls; want success after 2", err, calls)
		}
		if first.Verdict != retry.Failed || first.Method != "/svc/M" || first.Reason != "Internal" {
			t.Fatalf("the classifier saw %+v", first)
		}
	})
}
