package retry_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/retry"
)

// errRefusedLocally stands for a layer beneath refusing an attempt before sending it,
// with a time to come back: package breaker's open circuit, its next probe in 30 ms.
func half() float64 { return 0.5 }

var errRefusedLocally = &pushback.Error{Err: status.Error(codes.Unavailable, "breaker: circuit open"), Value: "30"}

// A call refused beneath with a time to come back is retried after that time, and
// no later (no share of the backoff: it comes back for the probe promised to it),
// when it comes before the deadline, whatever the method (nothing was sent); when it
// comes after, the call stops at once and spends no retry token.
func TestLocalRefusalWithPushback(t *testing.T) {
	for _, tc := range []struct {
		name     string
		budget   time.Duration
		attempts int
		wait     time.Duration
	}{
		{"next probe before the deadline", time.Second, 2, 30 * time.Millisecond},
		{"next probe after the deadline", 40 * time.Millisecond, 1, 0},
	} {
		t.Run(tc.name+"/HTTP", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := &fakeRT{fn: func(n int, _ *http.Request) (*http.Response, error) {
					if n == 1 {
						return nil, errRefusedLocally
					}
					return httpStatus(http.StatusOK), nil
				}}
				b := retry.NewBudget(0.1, 10, 10*time.Second)
				before := b.Balance()
				ctx, cancel := context.WithTimeout(context.Background(), tc.budget)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://backend.test/orders", nil)
				start := time.Now()
				resp, err := retry.NewTransport(base, retry.WithBudget(b), retry.WithRandom(half)).RoundTrip(req)
				if got := base.attempts(); got != tc.attempts {
					t.Fatalf("%d attempts; want %d", got, tc.attempts)
				}
				if tc.attempts == 1 {
					if !errors.As(err, new(*retry.StopError)) || !errors.Is(err, errRefusedLocally) || b.Balance() != before {
						t.Errorf("err %v, tokens %v → %v; want a stop wrapping the refusal and no token spent", err, before, b.Balance())
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if waited := base.times[1].Sub(start); waited != tc.wait {
					t.Errorf("retried after %v; want %v", waited, tc.wait)
				}
			})
		})
		t.Run(tc.name+"/gRPC", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var times []time.Time
				invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
					times = append(times, time.Now())
					if len(times) == 1 {
						return errRefusedLocally
					}
					return nil
				}
				b := retry.NewBudget(0.1, 10, 10*time.Second)
				before := b.Balance()
				ctx, cancel := context.WithTimeout(context.Background(), tc.budget)
				defer cancel()
				start := time.Now()
				err := retry.UnaryClientInterceptor(retry.WithBudget(b), retry.WithRandom(half))(ctx, "/svc/Create", nil, nil, nil, invoker)
				if len(times) != tc.attempts {
					t.Fatalf("%d attempts; want %d", len(times), tc.attempts)
				}
				if tc.attempts == 1 {
					if status.Code(err) != codes.DeadlineExceeded || !errors.Is(err, errRefusedLocally) || b.Balance() != before {
						t.Errorf("err %v, tokens %v → %v; want DEADLINE_EXCEEDED wrapping the refusal, no token spent", err, before, b.Balance())
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if waited := times[1].Sub(start); waited != tc.wait {
					t.Errorf("retried after %v; want %v", waited, tc.wait)
				}
			})
		})
	}
}

// A retry that a layer beneath refuses before sending (an open circuit) gives its
// token back, as one whose caller gives up during the wait does: nothing was sent.
// Whether the call then retries after the refusal's time (its next probe before the
// deadline: that retry is sent and spends one) or stops, it spends only the tokens
// of the retries that went out. The refused retry's token was kept, so that a
// circuit opening under calls that had failed once drained the client's budget
// with retries that never left it.
func TestRetryRefusedBeneathGivesItsTokenBack(t *testing.T) {
	for _, tc := range []struct {
		name     string
		budget   time.Duration
		attempts int     // made by the layer, the refused one included
		want     float64 // tokens left of the reserve of 10
	}{
		{"next probe before the deadline", time.Second, 3, 9},
		{"next probe after the deadline", 50 * time.Millisecond, 2, 10},
	} {
		t.Run(tc.name+"/HTTP", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := &fakeRT{fn: func(n int, _ *http.Request) (*http.Response, error) {
					switch n {
					case 1:
						return httpStatus(http.StatusServiceUnavailable), nil
					case 2:
						return nil, errRefusedLocally
					}
					return httpStatus(http.StatusOK), nil
				}}
				b := retry.NewBudget(0, 1, 10*time.Second)
				ctx, cancel := context.WithTimeout(context.Background(), tc.budget)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://backend.test/orders", nil)
				resp, err := retry.NewTransport(base, retry.WithBudget(b), retry.WithRandom(half)).RoundTrip(req)
				if err == nil {
					resp.Body.Close()
				}
				if got := base.attempts(); got != tc.attempts || b.Balance() != tc.want {
					t.Errorf("%d attempts, %v tokens left; want %d, %v", got, b.Balance(), tc.attempts, tc.want)
				}
			})
		})
		t.Run(tc.name+"/gRPC", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := 0
				invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
					n++
					switch n {
					case 1:
						return status.Error(codes.Unavailable, "busy")
					case 2:
						return errRefusedLocally
					}
					return nil
				}
				b := retry.NewBudget(0, 1, 10*time.Second)
				ctx, cancel := context.WithTimeout(context.Background(), tc.budget)
				defer cancel()
				_ = retry.UnaryClientInterceptor(idem, retry.WithBudget(b), retry.WithRandom(half))(ctx, "/svc/Get", nil, nil, nil, invoker)
				if n != tc.attempts || b.Balance() != tc.want {
					t.Errorf("%d attempts, %v tokens left; want %d, %v", n, b.Balance(), tc.attempts, tc.want)
				}
			})
		})
	}
}
