package connectkit_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/connectkit"
)

// A connect edge (WithEdge in HandlerOption), called by a plain connect client on
// each protocol: the guard's refusal in public words without the guard's internal
// metadata, two Idempotency-Key lines InvalidArgument before anything runs, the
// handler's own error as it wrote it.
func TestEdge(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			var ran atomic.Int32
			url, hc := serve(t, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
				ran.Add(1)
				if req.Msg.GetValue() == "decline" {
					return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("card declined"))
				}
				return connect.NewResponse(wrapperspb.String("ok")), nil
			}, connectkit.HandlerOption(deadlinekit.WithEdge(), deadlinekit.WithFloor(200*time.Millisecond)))
			c := client(hc, url, procPost, p.opt)
			// Connected first: the budget below is the server's to judge.
			if _, err := c.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("warm"))); err != nil {
				t.Fatal(err)
			}
			var ce *connect.Error
			if _, err := c.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("decline"))); !errors.As(err, &ce) ||
				ce.Code() != connect.CodeFailedPrecondition || ce.Message() != "card declined" {
				t.Errorf("the handler's decline: %v; want it as the handler wrote it", err)
			}
			ran.Store(0)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, err := c.CallUnary(ctx, connect.NewRequest(wrapperspb.String("a")))
			if !errors.As(err, &ce) || ce.Code() != connect.CodeDeadlineExceeded || ce.Message() != "not enough time left to serve the request" {
				t.Errorf("100 ms for a 200 ms floor: %v; want DeadlineExceeded in public words", err)
			} else {
				for k := range ce.Meta() {
					if strings.HasPrefix(strings.ToLower(k), "deadlinekit-") || strings.EqualFold(k, "grpc-retry-pushback-ms") {
						t.Errorf("the edge sent %s", k)
					}
				}
			}
			req := connect.NewRequest(wrapperspb.String("a"))
			req.Header().Add("Idempotency-Key", "order-1")
			req.Header().Add("Idempotency-Key", "order-2")
			_, err = c.CallUnary(context.Background(), req)
			if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || ce.Message() != "malformed Idempotency-Key: 2 values, want one" {
				t.Errorf("two keys: %v; want InvalidArgument naming them", err)
			}
			if n := ran.Load(); n != 0 {
				t.Errorf("the handler ran %d times, want 0", n)
			}
		})
	}
}
