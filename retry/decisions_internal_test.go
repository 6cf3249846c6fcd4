package retry

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// TestFiveDecisions is the table of REFERENCE.md ("five decisions a correct policy
// makes"): max 4 attempts, base 200 ms, max 2 s, jitter 0.5.
func TestFiveDecisions(t *testing.T) {
	connRefused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	readTimeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	resp := func(code int) *http.Response {
		return &http.Response{StatusCode: code, Status: http.StatusText(code), Header: http.Header{}}
	}
	cases := []struct {
		name    string
		method  string
		key     bool
		resp    *http.Response
		err     error
		sent    bool
		attempt int
		left    time.Duration // 0: no deadline
		u       []float64     // jitter draws to try
		want    Action
		minWait time.Duration
		maxWait time.Duration
		wantErr error
	}{
		{name: "GET after connection failure, attempt 1", method: "GET", err: connRefused, sent: false, attempt: 1,
			u: []float64{0, 0.3, 0.5, 0.999999}, want: Retry, minWait: 100 * time.Millisecond, maxWait: 300 * time.Millisecond},
		{name: "POST after read timeout, no key", method: "POST", err: readTimeout, sent: true, attempt: 1,
			u: []float64{0.5}, want: Return},
		{name: "POST after read timeout, with key", method: "POST", key: true, err: readTimeout, sent: true, attempt: 2,
			u: []float64{0, 0.5, 0.999999}, want: Retry, minWait: 200 * time.Millisecond, maxWait: 600 * time.Millisecond},
		{name: "GET 500 at attempt 4", method: "GET", resp: resp(500), sent: true, attempt: 4,
			u: []float64{0.5}, want: Return},
		{name: "429 at attempt 2, 100ms left, backoff ~582ms", method: "GET", resp: resp(429), sent: true, attempt: 2,
			left: 100 * time.Millisecond, u: []float64{0.955}, want: Stop, wantErr: context.DeadlineExceeded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, u := range tc.u {
				synctest.Test(t, func(t *testing.T) {
					c := newConfig([]Option{
						WithMaxAttempts(4),
						WithBackoff(Backoff{Base: 200 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.5}),
						WithRandom(func() float64 { return u }),
						WithBudget(nil),
					})
					ctx := context.Background()
					if tc.left > 0 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, tc.left)
						defer cancel()
					}
					req, _ := http.NewRequestWithContext(ctx, tc.method, "http://example.invalid/", nil)
					d := classifyHTTP(httpAttempt{req: req, resp: tc.resp, err: tc.err, sent: tc.sent, hasKey: tc.key})
					var action Action
					var wait time.Duration
					var err error
					if d.verdict == Retryable {
						action, wait, err = c.plan(ctx, tc.attempt, 4, d, tc.err)
					} else {
						action = Return
					}
					if action != tc.want {
						t.Fatalf("u=%v: verdict %v (%s), action %v; want %v", u, d.verdict, d.reason, action, tc.want)
					}
					if action == Retry && (wait < tc.minWait || wait > tc.maxWait) {
						t.Fatalf("u=%v: wait %v; want %v–%v", u, wait, tc.minWait, tc.maxWait)
					}
					if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
						t.Fatalf("u=%v: err %v; want %v", u, err, tc.wantErr)
					}
					t.Logf("u=%v: verdict %v (%s) → %v wait=%v err=%v", u, d.verdict, d.reason, action, wait, err)
				})
			}
		})
	}
}

func TestPlanPushback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newConfig([]Option{WithBudget(nil), WithMaxPushback(5 * time.Second)})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		last := errors.New("boom")
		// A pushback replaces the backoff.
		if a, w, err := c.plan(ctx, 1, 3, decision{verdict: Retryable, hasPushback: true, pushback: 2 * time.Second}, last); a != Retry || w != 2*time.Second || err != nil {
			t.Fatalf("pushback 2s: %v %v %v", a, w, err)
		}
		// Negative: do not retry.
		if a, _, _ := c.plan(ctx, 1, 3, decision{verdict: Retryable, hasPushback: true, pushback: -1}, last); a != Return {
			t.Fatalf("negative pushback: %v; want Return", a)
		}
		// Above the cap: stop.
		a, _, err := c.plan(ctx, 1, 3, decision{verdict: Retryable, hasPushback: true, pushback: 6 * time.Second}, last)
		if a != Stop || !errors.As(err, new(*StopError)) || !errors.Is(err, last) {
			t.Fatalf("pushback over the cap: %v %v", a, err)
		}
		// Within the cap but past the deadline: deadline rule.
		<-time.After(7 * time.Second) // the bubble's clock
		a, _, err = c.plan(ctx, 1, 3, decision{verdict: Retryable, hasPushback: true, pushback: 3 * time.Second}, last)
		var de *StopError
		if a != Stop || !errors.As(err, &de) || de.Remaining != 3*time.Second || !de.Pushback {
			t.Fatalf("pushback past the deadline: %v %v", a, err)
		}
	})
}

func TestAttemptTimedOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		limit := 100 * time.Millisecond
		call, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if attemptTimedOut(call, call, limit) {
			t.Fatal("an attempt without a deadline of its own timed out")
		}
		a, cancelA := context.WithTimeout(call, limit)
		defer cancelA()
		<-time.After(50 * time.Millisecond)
		if attemptTimedOut(call, a, limit) {
			t.Fatal("failed halfway through: not a timeout")
		}
		<-time.After(45 * time.Millisecond)
		if !attemptTimedOut(call, a, limit) {
			t.Fatal("failed 5 ms before the attempt deadline (a server's rounded-down budget): a timeout")
		}
		<-time.After(10 * time.Millisecond)
		if !attemptTimedOut(call, a, limit) {
			t.Fatal("attempt deadline passed: a timeout")
		}
		// The call's own deadline binds: not a per-attempt timeout.
		short, cancelS := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancelS()
		b, cancelB := context.WithTimeout(short, limit)
		defer cancelB()
		<-time.After(60 * time.Millisecond)
		if attemptTimedOut(short, b, limit) {
			t.Fatal("the call's deadline ended the attempt: not a per-attempt timeout")
		}
	})
}
