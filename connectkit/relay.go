package connectkit

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/deadlinekit/deadlinekit"
)

// Error returns the error a connect handler returns for err (nil for nil), as
// [deadlinekit.GRPCError] does for a grpc-go handler: a *connect.Error with the code
// and message of err's answer (an open circuit is Unavailable, a refusal for lack of
// budget DeadlineExceeded, a [*deadlinekit.WireError] its own code...), the wait the
// downstream named as google.rpc.RetryInfo, and as metadata grpc-retry-pushback-ms
// ("do not retry", or the wait) and, for a failure that came from a downstream,
// deadlinekit-relayed: 1, which tells the caller's breaker that this server is up:
//
//	resp, err := client.Do(req)
//	if err := deadlinekit.FromHTTP(resp, err); err != nil {
//		return nil, connectkit.Error(err)
//	}
//
// The error returned unwraps to err.
func Error(err error) error {
	if err == nil {
		return nil
	}
	var tr trailerOnly
	gerr := deadlinekit.GRPCError(grpc.NewContextWithServerTransportStream(context.Background(), &tr), err)
	return toConnect(gerr, tr.md)
}

// trailerOnly is a grpc.ServerTransportStream that keeps the trailer set on it, so
// that GRPCError's trailer can become a connect error's metadata.
type trailerOnly struct{ md metadata.MD }

func (*trailerOnly) Method() string                    { return "" }
func (*trailerOnly) SetHeader(metadata.MD) error       { return nil }
func (*trailerOnly) SendHeader(metadata.MD) error      { return nil }
func (t *trailerOnly) SetTrailer(md metadata.MD) error { t.md = metadata.Join(t.md, md); return nil }
