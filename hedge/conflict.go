package hedge

import (
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

// A keyed request's copies share one idempotency key, and a server that deduplicates
// (package dedup) runs only the first copy to arrive: it holds the key's lease, and
// a copy that comes while it runs, and cannot wait for its answer, is answered 409
// (gRPC ABORTED) with a positive pushback: "the first with this key is still being
// processed, come back then". That copy is refused, not answered: the copy holding
// the lease brings the call's answer. Package retry reads the same signal the same
// way (a 409 / ABORTED on a keyed call with a positive pushback; without one it is
// the application's conflict, an answer).

// httpDedupConflict reports whether resp, the answer to a copy of a keyed request,
// is the server's deduplication refusing it.
func httpDedupConflict(resp *http.Response) bool {
	if resp == nil || resp.StatusCode != http.StatusConflict {
		return false
	}
	p, found, err := pushback.FromHTTP(resp.Header, time.Now())
	return found && err == nil && p > 0
}

// grpcDedupConflict reports whether trailer, that of a copy of a keyed call that
// failed ABORTED, says the server's deduplication refused it.
func grpcDedupConflict(trailer metadata.MD) bool {
	v := trailer.Get(pushback.Key)
	if len(v) == 0 {
		return false
	}
	p, err := pushback.ParseMs(v[0])
	return err == nil && p > 0
}

// callerTrailer returns where the caller asked the call's trailer to be written, or
// nil.
func callerTrailer(opts []grpc.CallOption) *metadata.MD {
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.TrailerCallOption:
			return o.TrailerAddr
		case *grpc.TrailerCallOption:
			return o.TrailerAddr
		}
	}
	return nil
}
