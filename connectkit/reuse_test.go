package connectkit_test

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
)

// TestCallerReusesRequestAfterReturn: a connect caller may change its request (its
// header, its message) and send it again once the call has returned; connect-go
// itself writes into the request's header as it sends it. A hedge still running
// then (a loser, whose interceptor below logs the request once its next returned)
// must read neither the caller's header nor its message. With the hedging layer
// alone, directly beneath the caller, and beneath the whole stack (retry above it).
func TestCallerReusesRequestAfterReturn(t *testing.T) {
	var hedged atomic.Int64
	url, hc := serve(t, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
		// The primary answers after a moment; a hedge is held until cancelled.
		d := 3 * time.Millisecond
		if req.Header().Get("Grpc-Previous-Rpc-Attempts") != "" {
			hedged.Add(1)
			d = time.Second
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return connect.NewResponse(wrapperspb.String(req.Msg.GetValue() + "/" + req.Header().Get("X-Seq"))), nil
	})
	// Copies go out on connections of their own, so that nothing orders a hedge's
	// steps before the caller's next ones.
	primaries, hedges := hc.Transport.(*http.Transport).Clone(), hc.Transport.(*http.Transport).Clone()
	t.Cleanup(primaries.CloseIdleConnections)
	t.Cleanup(hedges.CloseIdleConnections)
	split := &http.Client{Transport: testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Header.Get("Grpc-Previous-Rpc-Attempts") != "" {
			return hedges.RoundTrip(r)
		}
		return primaries.RoundTrip(r)
	})}
	logged := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			resp, err := next(ctx, req)
			if req.Header().Get("Grpc-Previous-Rpc-Attempts") != "" {
				time.Sleep(20 * time.Millisecond) // a logger slow to write a loser's line
			}
			// The line logs the request.
			_, _ = proto.Size(req.Any().(proto.Message)), req.Header().Get("X-Seq")
			return resp, err
		}
	})
	delay := hedge.WithDelay(hedge.Delay{Initial: 2 * time.Millisecond, MinSamples: 1 << 20})
	for _, s := range []struct {
		name  string
		stack connect.ClientOption
	}{
		{"hedge", connect.WithInterceptors(connectkit.Hedge(delay, hedge.WithMaxExtraLoad(1)))},
		{"stack", connectkit.ClientOption(deadlinekit.WithSharedHedger(hedge.New(delay, hedge.WithMaxExtraLoad(1))))},
	} {
		t.Run(s.name, func(t *testing.T) {
			hedged.Store(0)
			get := client(split, url, procGet, s.stack, connect.WithInterceptors(logged))
			testkit.Parallel(6, 6, func(int) {
				req := connect.NewRequest(&msg{})
				for i := range 60 {
					seq := strconv.Itoa(i)
					req.Header().Set("X-Seq", seq)
					req.Msg.Value = seq
					resp, err := get.CallUnary(context.Background(), req)
					if err != nil {
						t.Errorf("call %d: %v", i, err)
						return
					}
					if got := resp.Msg.GetValue(); got != seq+"/"+seq {
						t.Errorf("call %d answered %q", i, got)
					}
				}
			})
			if hedged.Load() == 0 {
				t.Error("no hedge reached the server")
			}
		})
	}
}
