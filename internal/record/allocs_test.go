//go:build !race

package record

import (
	"context"
	"testing"
)

// A traced call of one attempt allocates no more than the SDK's spans and the
// attributes' values need (the race detector allocates on its own, hence the build
// tag): its context and state are one allocation, and the start options of its
// spans and the attempt's outcome are made once.
func TestTracedCallAllocs(t *testing.T) {
	tp, _, _ := withSDK(t)
	ctx, span := tp.Tracer("test").Start(context.Background(), "handle")
	defer span.End()
	n := testing.AllocsPerRun(100, func() {
		cctx, call := StartCall(ctx, GRPC, "/pkg.Service/Method")
		_, a := StartAttempt(cctx, GRPC, KindPrimary, 1)
		a.End(OutcomeSuccess, nil)
		call.End(nil)
	})
	if n > tracedCallAllocs {
		t.Errorf("a traced call of one attempt: %v allocations; want at most %d", n, tracedCallAllocs)
	}
}

// tracedCallAllocs is what TestTracedCallAllocs allows: the two spans the SDK makes
// and what it records on them.
const tracedCallAllocs = 13
