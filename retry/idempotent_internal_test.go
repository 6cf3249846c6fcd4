package retry

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/internal/idempotency"
	"github.com/deadlinekit/deadlinekit/internal/idempotency/idempotencytest"
)

// init registers service deadlinekit.retrytest.Store in protoregistry.GlobalFiles, as
// generated code would: Get has no side effects, Put is idempotent, Post declares
// nothing.
func init() {
	if err := idempotencytest.Register("deadlinekit.retrytest"); err != nil {
		panic(err)
	}
}

func TestGRPCIdempotent(t *testing.T) {
	c := newConfig([]Option{WithIdempotentMethods("/deadlinekit.retrytest.Store/Post2")})
	keyed := metadata.AppendToOutgoingContext(context.Background(), idempotency.Key, "k-1")
	blank := metadata.AppendToOutgoingContext(context.Background(), idempotency.Key, " ")
	for _, tc := range []struct {
		ctx    context.Context
		method string
		want   bool
	}{
		{context.Background(), "/deadlinekit.retrytest.Store/Get", true},
		{context.Background(), "/deadlinekit.retrytest.Store/Put", true},
		{context.Background(), "/deadlinekit.retrytest.Store/Post", false},
		{keyed, "/deadlinekit.retrytest.Store/Post", true},
		{blank, "/deadlinekit.retrytest.Store/Post", false},                // a blank key is no key
		{context.Background(), "/deadlinekit.retrytest.Store/Post2", true}, // by option
		{context.Background(), "/deadlinekit.retrytest.Msg/Get", false},
		{context.Background(), "", false},
		{context.Background(), "/", false},
		{context.Background(), "/a b/c", false},
	} {
		if got := c.grpcIdempotent(tc.ctx, tc.method); got != tc.want {
			t.Errorf("grpcIdempotent(%q) = %v; want %v", tc.method, got, tc.want)
		}
	}
}

// A timed-out attempt may have run: only an idempotent or keyed call is retried.
func TestPerAttemptTimeoutNeedsIdempotence(t *testing.T) {
	err := status.Error(codes.DeadlineExceeded, "attempt timed out")
	st, _ := status.FromError(err)
	for _, idem := range []bool{false, true} {
		d := classifyGRPC(grpcAttempt{err: err, status: st, timedOut: true, idem: idem})
		if want := map[bool]Verdict{false: Failed, true: Retryable}[idem]; d.verdict != want {
			t.Errorf("idempotent=%v: %v (%s); want %v", idem, d.verdict, d.reason, want)
		}
	}
}
