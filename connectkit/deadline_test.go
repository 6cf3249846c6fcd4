package connectkit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// The client's reserve comes off the budget on the wire, and the handler's context
// has what is left, under each protocol.
func TestPropagateBudgetDecreases(t *testing.T) {
	var left atomic.Int64
	var source atomic.Value
	url, hc := serve(t, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
		d, _ := deadline.Remaining(ctx)
		left.Store(int64(d))
		in, _ := propagate.InboundFromContext(ctx)
		source.Store(in.Source)
		return connect.NewResponse(wrapperspb.String("ok")), nil
	}, connect.WithInterceptors(connectkit.Propagate()))
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			c := client(hc, url, procGet, p.opt, connect.WithInterceptors(connectkit.Propagate(propagate.WithReserve(100*time.Millisecond))))
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if _, err := c.CallUnary(ctx, connect.NewRequest(wrapperspb.String("x"))); err != nil {
				t.Fatal(err)
			}
			got := time.Duration(left.Load())
			if got <= 0 || got > 900*time.Millisecond {
				t.Errorf("the handler had %v; want less than 900ms (1 s less the 100 ms reserve)", got)
			}
			want := propagate.SourceGRPCTimeout
			if p.name == "connect" {
				want = propagate.SourceConnectTimeout
			}
			if s := source.Load(); s != want {
				t.Errorf("budget source %v; want %s", s, want)
			}
		})
	}
}

// A call with less than the floor left is refused by the client, unsent.
func TestPropagateFloorRefusesBeforeSending(t *testing.T) {
	var calls atomic.Int32
	url, hc := serve(t, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
		calls.Add(1)
		return ok(ctx, req)
	})
	c := client(hc, url, procGet, connect.WithInterceptors(connectkit.Propagate(propagate.WithFloor(20*time.Millisecond))))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err := c.CallUnary(ctx, connect.NewRequest(wrapperspb.String("x")))
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded || !errors.Is(err, deadline.ErrInsufficientBudget) {
		t.Errorf("err = %v (code %v); want DeadlineExceeded matching deadline.ErrInsufficientBudget", err, connect.CodeOf(err))
	}
	if calls.Load() != 0 {
		t.Error("the call was sent")
	}
}

// The guard refuses a request below its floor before the handler runs, with "do not
// retry", under each protocol.
func TestShortCircuitRefusesBelowTheFloor(t *testing.T) {
	var calls atomic.Int32
	url, hc := serve(t, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
		calls.Add(1)
		return ok(ctx, req)
	}, connect.WithInterceptors(connectkit.Propagate(), connectkit.ShortCircuit(shortcircuit.WithFloor(200*time.Millisecond))))
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			c := client(hc, url, procGet, p.opt)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, err := c.CallUnary(ctx, connect.NewRequest(wrapperspb.String("x")))
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeDeadlineExceeded || ce.Meta().Get("Grpc-Retry-Pushback-Ms") != "-1" {
				t.Fatalf("err = %v; want DeadlineExceeded with grpc-retry-pushback-ms -1", err)
			}
			if calls.Load() != 0 {
				t.Error("the handler ran")
			}
		})
	}
}

// A full queue answers ResourceExhausted with RetryInfo and a pushback.
func TestShortCircuitOverloadedSaysWhenToComeBack(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	url, hc := serve(t, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
		entered <- struct{}{}
		<-release
		return ok(ctx, req)
	}, connect.WithInterceptors(connectkit.ShortCircuit(shortcircuit.WithMaxConcurrency(1), shortcircuit.WithQueue(0, shortcircuit.FIFO))))
	c := client(hc, url, procGet)
	done := make(chan error, 1)
	go func() {
		_, err := c.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("hold")))
		done <- err
	}()
	<-entered
	_, err := c.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x")))
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted || ce.Meta().Get("Grpc-Retry-Pushback-Ms") == "" {
		t.Fatalf("err = %v; want ResourceExhausted with a pushback", err)
	}
	found := false
	for _, d := range ce.Details() {
		if m, err := d.Value(); err == nil {
			if _, ok := m.(*errdetails.RetryInfo); ok {
				found = true
			}
		}
	}
	if !found {
		t.Error("no RetryInfo in the error's details")
	}
}
