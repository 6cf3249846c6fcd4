package propagate

import (
	"context"
	"errors"
	"io"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/internal/attempts"
	"github.com/deadlinekit/deadlinekit/internal/record"
	"github.com/deadlinekit/deadlinekit/internal/rpc"
)

// The adapters of this layer for frameworks it does not import (package connectkit).
// Such a framework, like grpc-go, writes and reads the wire's timeout header itself
// (Connect-Timeout-Ms, grpc-timeout) from and into the context's deadline: the client
// side derives the context, the server side applies the server's rules to it.
func init() {
	rpc.Register("propagate", func(opts []Option) rpc.Layer {
		c := newConfig(opts)
		return rpc.Layer{Client: c.rpcClient, Stream: c.rpcStream, Server: c.rpcServer, Stamps: []string{criticality.MetadataKey}}
	})
}

func (c *config) rpcClient(ctx context.Context, call *rpc.Call, send rpc.Send) rpc.Answer {
	ctx, span := record.StartCall(ctx, record.GRPC, call.Procedure)
	child, cancel, err := c.clientContext(ctx)
	if err != nil {
		span.End(err)
		return rpc.Answer{Err: err}
	}
	a := send(withLevelMetadata(child))
	cancel()
	span.End(a.Err)
	return a
}

func (c *config) rpcStream(ctx context.Context, call *rpc.Call) (context.Context, func(error), error) {
	ctx, span := record.StartCall(ctx, record.GRPC, call.Procedure)
	child, cancel, err := c.clientContext(ctx)
	if err != nil {
		span.End(err)
		return ctx, nil, err
	}
	return withLevelMetadata(child), func(err error) {
		cancel()
		if errors.Is(err, io.EOF) {
			err = nil
		}
		span.End(err)
	}, nil
}

func (c *config) rpcServer(ctx context.Context, in *rpc.Inbound, handle rpc.Handle) (any, error) {
	ctx, cancel, err := c.rpcServerContext(ctx, in.Header, in.Stream)
	if err != nil {
		r := &rpc.Refusal{Err: err}
		if status.Code(err) == codes.DeadlineExceeded {
			r.Meta = doNotRetry
		}
		return nil, r
	}
	defer cancel()
	return handle(ctx)
}

// rpcServerContext is serverContext for a framework that applied the caller's
// timeout header to ctx itself, with the request's headers h: the Envoy header when
// trusted, the clamp and the default budget (for a stream, neither: the stream
// maximum only), and the trusted caller's level. For a caller [WithTrustGRPC]
// refuses, the Envoy, attempt and level headers are removed from h, which the
// handler sees.
func (c *config) rpcServerContext(ctx context.Context, h http.Header, stream bool) (context.Context, context.CancelFunc, error) {
	covered := false
	if c.trustGRPC != nil && !c.trustGRPC(ctx) {
		h.Del(HeaderEnvoyTimeout)
		h.Del(attempts.Header)
		h.Del(attempts.CoveredHeader)
		h.Del(HeaderCriticality)
	} else {
		covered = attempts.Covers(h.Get(attempts.CoveredHeader), h.Get(attempts.Header)) // the chain rule, package hedge
	}
	ctx, err := c.inboundLevel(ctx, h.Values(HeaderCriticality))
	if err != nil {
		return ctx, nil, status.Error(codes.InvalidArgument, "propagate: "+err.Error())
	}
	source := SourceGRPCTimeout
	if h.Get(HeaderConnectTimeout) != "" {
		source = SourceConnectTimeout
	}
	return c.frameworkContext(ctx, source, h.Values(HeaderEnvoyTimeout), stream, covered)
}
