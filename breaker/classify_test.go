package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
)

func resp(code int, kv ...string) *http.Response {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return &http.Response{StatusCode: code, Header: h}
}

func grpcErr(c codes.Code) error { return status.Error(c, c.String()) }

var refusedTrailer = metadata.Pairs(pushback.Key, pushback.DoNotRetry)

// Budgets for the timeout rows: the target's typical latency is 100 ms.
const typical = 100 * time.Millisecond

func starved(r breaker.Result) breaker.Result {
	r.Budget, r.HasBudget, r.Typical, r.HasTypical = 20*time.Millisecond, true, typical, true
	return r
}

func fair(r breaker.Result) breaker.Result {
	r.Budget, r.HasBudget, r.Typical, r.HasTypical = time.Second, true, typical, true
	return r
}

func TestClassify(t *testing.T) {
	refusedConn := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	netTimeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	budget := &deadline.BudgetError{Remaining: time.Millisecond, Needed: 10 * time.Millisecond}
	open := &breaker.OpenError{Target: "x", State: breaker.Open, RetryAfter: time.Second}
	H := func(code int, kv ...string) breaker.Result { return breaker.Result{Response: resp(code, kv...)} }
	E := func(err error) breaker.Result { return breaker.Result{Err: err} }
	G := func(err error) breaker.Result { return breaker.Result{GRPC: true, Err: err} }
	canceled := func(r breaker.Result) breaker.Result { r.CallerErr = context.Canceled; return r }
	expired := func(r breaker.Result) breaker.Result { r.CallerErr = context.DeadlineExceeded; return r }
	withTrailer := func(r breaker.Result, md metadata.MD) breaker.Result { r.Trailer = md; return r }
	answering := func(r breaker.Result) breaker.Result { r.SheddingSince = true; return r }
	watch := func(r breaker.Result, took time.Duration) breaker.Result {
		r.ServerStreams, r.Took = true, took
		return r
	}

	for _, c := range []struct {
		name string
		r    breaker.Result
		want breaker.Outcome
	}{
		// Failures.
		{"HTTP connection refused", E(refusedConn), breaker.Failure},
		{"HTTP connection reset", E(reset), breaker.Failure},
		{"HTTP unexpected EOF", E(io.ErrUnexpectedEOF), breaker.Failure},
		{"HTTP 502", H(502), breaker.Failure},
		{"HTTP 503", H(503), breaker.Failure},
		{"HTTP 503 with Retry-After 0", H(503, "Retry-After", "0"), breaker.Failure},
		{"HTTP 503 with a Retry-After date past", H(503, "Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT"), breaker.Failure},
		{"HTTP 503 with a malformed Retry-After", H(503, "Retry-After", "soon"), breaker.Failure},
		{"HTTP 503 with pushback -1", H(503, pushback.Key, "-1"), breaker.Failure},
		{"HTTP 504, fair budget", fair(H(504)), breaker.Failure},
		{"HTTP 504, typical unknown", H(504), breaker.Failure},
		{"HTTP 504 with a pushback delay, not a refusal", fair(H(504, pushback.Key, "100")), breaker.Failure},
		{"HTTP attempt timeout, fair budget", fair(expired(E(context.DeadlineExceeded))), breaker.Failure},
		{"HTTP net timeout, fair budget", fair(E(netTimeout)), breaker.Failure},
		{"HTTP timeout without a deadline", E(netTimeout), breaker.Failure},
		{"HTTP timeout, budget equal to typical", func() breaker.Result {
			r := fair(E(context.DeadlineExceeded))
			r.Budget = typical
			return r
		}(), breaker.Failure},
		{"gRPC UNAVAILABLE", G(grpcErr(codes.Unavailable)), breaker.Failure},
		{"gRPC DEADLINE_EXCEEDED, fair budget", fair(expired(G(grpcErr(codes.DeadlineExceeded)))), breaker.Failure},
		{"gRPC DEADLINE_EXCEEDED, typical unknown", G(grpcErr(codes.DeadlineExceeded)), breaker.Failure},
		{"gRPC error without status", G(refusedConn), breaker.Failure},
		{"gRPC context deadline, fair budget", fair(expired(G(context.DeadlineExceeded))), breaker.Failure},
		{"gRPC watch's DEADLINE_EXCEEDED early in its budget", watch(fair(G(grpcErr(codes.DeadlineExceeded))), 10*time.Millisecond), breaker.Failure},
		{"gRPC watch's UNAVAILABLE at its deadline", watch(fair(expired(G(grpcErr(codes.Unavailable)))), time.Second), breaker.Failure},

		// The target answered others meanwhile: a timeout is neutral, nothing else.
		{"HTTP 503 while answering others", answering(H(503)), breaker.Failure},
		{"HTTP connection refused while answering others", answering(E(refusedConn)), breaker.Failure},
		{"gRPC UNAVAILABLE while answering others", answering(G(grpcErr(codes.Unavailable))), breaker.Failure},
		{"HTTP timeout, fair budget, while answering others", answering(fair(expired(E(context.DeadlineExceeded)))), breaker.Neutral},
		{"HTTP timeout without a deadline, while answering others", answering(E(netTimeout)), breaker.Neutral},
		{"HTTP 504, fair budget, while answering others", answering(fair(H(504))), breaker.Neutral},
		{"gRPC DEADLINE_EXCEEDED, fair budget, while answering others", answering(fair(expired(G(grpcErr(codes.DeadlineExceeded))))), breaker.Neutral},

		// Neutral.
		{"HTTP caller cancelled", canceled(E(context.Canceled)), breaker.Neutral},
		{"HTTP caller cancelled, wrapped", canceled(E(fmt.Errorf("net/http: request canceled: %w", context.Canceled))), breaker.Neutral},
		{"HTTP caller cancelled, transport says reset", canceled(E(reset)), breaker.Neutral},
		{"HTTP timeout, starved budget", starved(expired(E(context.DeadlineExceeded))), breaker.Neutral},
		{"HTTP net timeout, starved budget", starved(E(netTimeout)), breaker.Neutral},
		{"HTTP 504, starved budget", starved(H(504)), breaker.Neutral},
		{"HTTP 504 with pushback -1: a guard's refusal", fair(H(504, pushback.Key, "-1")), breaker.Neutral},
		{"HTTP local refusal", E(budget), breaker.Neutral},
		{"HTTP local refusal, wrapped", E(fmt.Errorf("propagate: %w", budget)), breaker.Neutral},
		{"HTTP open breaker beneath", E(open), breaker.Neutral},
		{"HTTP no response and no error", breaker.Result{}, breaker.Neutral},
		{"gRPC CANCELED", G(grpcErr(codes.Canceled)), breaker.Neutral},
		{"gRPC caller cancelled, UNAVAILABLE", canceled(G(grpcErr(codes.Unavailable))), breaker.Neutral},
		{"gRPC caller cancelled, context error", canceled(G(context.Canceled)), breaker.Neutral},
		{"gRPC DEADLINE_EXCEEDED, starved budget", starved(expired(G(grpcErr(codes.DeadlineExceeded)))), breaker.Neutral},
		{"gRPC DEADLINE_EXCEEDED with pushback -1: a guard's refusal", fair(withTrailer(G(grpcErr(codes.DeadlineExceeded)), refusedTrailer)), breaker.Neutral},
		{"gRPC local refusal", G(budget), breaker.Neutral},
		{"gRPC idle watch ended by its caller's deadline", watch(fair(expired(G(grpcErr(codes.DeadlineExceeded)))), time.Second), breaker.Neutral},
		{"gRPC idle watch ended by its own deadline, less the reserve", watch(fair(G(grpcErr(codes.DeadlineExceeded))), 995*time.Millisecond), breaker.Neutral},
		{"gRPC idle watch ended by its caller's deadline, no typical latency", watch(expired(G(context.DeadlineExceeded)), time.Second), breaker.Neutral},
		{"gRPC open breaker beneath", G(open), breaker.Neutral},
		{"HTTP 503 with Retry-After: overloaded, come back", H(503, "Retry-After", "3"), breaker.Neutral},
		{"HTTP 503 with a Retry-After date ahead", H(503, "Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)), breaker.Neutral},
		{"HTTP 503 with pushback ms: a circuit open further down", H(503, pushback.Key, "900"), breaker.Neutral},
		{"gRPC UNAVAILABLE with pushback ms", withTrailer(G(grpcErr(codes.Unavailable)), metadata.Pairs(pushback.Key, "900")), breaker.Neutral},
		// A failure the server relays is its downstream's: the server is up.
		{"HTTP 502 relayed", H(502, pushback.RelayedKey, "1"), breaker.Neutral},
		{"HTTP 503 relayed", H(503, pushback.RelayedKey, "1"), breaker.Neutral},
		{"HTTP 504 relayed, fair budget", fair(H(504, pushback.RelayedKey, "1")), breaker.Neutral},
		{"gRPC UNAVAILABLE relayed", withTrailer(G(grpcErr(codes.Unavailable)), metadata.Pairs(pushback.RelayedKey, "1")), breaker.Neutral},
		{"gRPC DEADLINE_EXCEEDED relayed, fair budget", withTrailer(fair(G(grpcErr(codes.DeadlineExceeded))), metadata.Pairs(pushback.RelayedKey, "1")), breaker.Neutral},

		// Successes.
		{"HTTP 200", H(200), breaker.Success},
		{"HTTP 204", H(204), breaker.Success},
		{"HTTP 301", H(301), breaker.Success},
		{"HTTP 400", H(400), breaker.Success},
		{"HTTP 404", H(404), breaker.Success},
		{"HTTP 429", H(429), breaker.Success},
		{"HTTP 500", H(500), breaker.Success},
		{"HTTP 200 with pushback -1", H(200, pushback.Key, "-1"), breaker.Success},
		{"gRPC OK", G(nil), breaker.Success},
		{"gRPC NOT_FOUND", G(grpcErr(codes.NotFound)), breaker.Success},
		{"gRPC INVALID_ARGUMENT", G(grpcErr(codes.InvalidArgument)), breaker.Success},
		{"gRPC PERMISSION_DENIED", G(grpcErr(codes.PermissionDenied)), breaker.Success},
		{"gRPC FAILED_PRECONDITION", G(grpcErr(codes.FailedPrecondition)), breaker.Success},
		{"gRPC RESOURCE_EXHAUSTED", G(grpcErr(codes.ResourceExhausted)), breaker.Success},
		{"gRPC INTERNAL", G(grpcErr(codes.Internal)), breaker.Success},
		{"gRPC UNAVAILABLE with pushback -1 is still a failure", withTrailer(G(grpcErr(codes.Unavailable)), refusedTrailer), breaker.Failure},
	} {
		if got := breaker.Classify(c.r); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestWithClassifier(t *testing.T) {
	// A user who counts 429 as a failure, and leaves the rest to Classify.
	tooMany := func(r breaker.Result) breaker.Outcome {
		if r.Response != nil && r.Response.StatusCode == http.StatusTooManyRequests {
			return breaker.Failure
		}
		return breaker.Classify(r)
	}
	// The throttle off: on (the default), it would refuse some of the calls after
	// the first 429 locally, at random, where this test counts on three being sent.
	b := breaker.New(breaker.WithClassifier(tooMany), breaker.WithMinCalls(3), breaker.WithoutAdaptiveThrottling())
	rt := b.Transport(testkit.RoundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 429, Body: http.NoBody, Header: http.Header{}}, nil
	}))
	for range 3 {
		req, _ := http.NewRequest("GET", "http://x.test/", nil)
		if _, err := rt.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
	}
	req, _ := http.NewRequest("GET", "http://x.test/", nil)
	if _, err := rt.RoundTrip(req); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("after three 429s: %v, want the circuit open", err)
	}
}
