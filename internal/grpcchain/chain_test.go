package grpcchain_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	"google.golang.org/grpc"

	"github.com/deadlinekit/deadlinekit/internal/grpcchain"
)

type step struct{}

// trail is what the interceptors of a test call saw, in order.
type trail struct{ seen []string }

// clientLayer returns an interceptor that notes its name and the context value the
// layer before it set, sets its own, and calls its invoker.
func (tr *trail) clientLayer(name string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		prev, _ := ctx.Value(step{}).(string)
		tr.seen = append(tr.seen, name+" after "+prev+" opts "+strconv.Itoa(len(opts)))
		return invoker(context.WithValue(ctx, step{}, name), method, req, reply, cc, append(opts, grpc.EmptyCallOption{})...)
	}
}

func TestClientRunsInOrder(t *testing.T) {
	errFinal := errors.New("final")
	for n := 0; n <= 4; n++ {
		tr := &trail{}
		var ics []grpc.UnaryClientInterceptor
		var want []string
		prev := "caller"
		for i := range n {
			name := "c" + strconv.Itoa(i)
			ics = append(ics, tr.clientLayer(name))
			want = append(want, name+" after "+prev+" opts "+strconv.Itoa(1+i))
			prev = name
		}
		want = append(want, "final after "+prev+" opts "+strconv.Itoa(1+n))
		joined := grpcchain.Client(ics...)
		if n == 0 {
			if joined != nil {
				t.Fatal("no interceptor: want nil")
			}
			continue
		}
		final := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			got, _ := ctx.Value(step{}).(string)
			tr.seen = append(tr.seen, "final after "+got+" opts "+strconv.Itoa(len(opts)))
			if method != "/s/m" || req != "req" || reply != "reply" {
				t.Errorf("final invoker got %q %v %v", method, req, reply)
			}
			return errFinal
		}
		ctx := context.WithValue(t.Context(), step{}, "caller")
		for range 2 { // the links are made once: a second call runs the same way
			tr.seen = nil
			if err := joined(ctx, "/s/m", "req", "reply", nil, final, grpc.EmptyCallOption{}); err != errFinal {
				t.Fatalf("%d interceptors: err %v", n, err)
			}
			if !slices.Equal(tr.seen, want) {
				t.Errorf("%d interceptors:\n got %q\nwant %q", n, tr.seen, want)
			}
		}
	}
}

// TestClientNested: a call made beneath another call's joined chain, through a
// chain joined from the same interceptors, reaches its own final invoker.
func TestClientNested(t *testing.T) {
	pass := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	inner := grpcchain.Client(pass, pass)
	var got []string
	innerFinal := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		got = append(got, "inner final")
		return nil
	}
	calling := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if err := inner(ctx, "/inner", nil, nil, nil, innerFinal); err != nil {
			return err
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	outer := grpcchain.Client(pass, calling, pass)
	outerFinal := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		got = append(got, "outer final")
		return nil
	}
	if err := outer(t.Context(), "/outer", nil, nil, nil, outerFinal); err != nil {
		t.Fatal(err)
	}
	if want := []string{"inner final", "outer final"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// serverLayer returns an interceptor that notes its name, the method of the info
// it was given and the context value the layer before it set, sets its own, and
// calls its handler.
func (tr *trail) serverLayer(name string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		prev, _ := ctx.Value(step{}).(string)
		tr.seen = append(tr.seen, name+" after "+prev+" on "+info.FullMethod)
		resp, err := handler(context.WithValue(ctx, step{}, name), req)
		return resp.(string) + "<" + name, err
	}
}

func TestServerRunsInOrder(t *testing.T) {
	errFinal := errors.New("final")
	for n := 0; n <= 4; n++ {
		tr := &trail{}
		var sis []grpc.UnaryServerInterceptor
		var want []string
		prev, wantResp := "server", "resp"
		for i := range n {
			name := "s" + strconv.Itoa(i)
			sis = append(sis, tr.serverLayer(name))
			want = append(want, name+" after "+prev+" on /s/m")
			prev = name
			wantResp += "<s" + strconv.Itoa(n-1-i)
		}
		want = append(want, "handler after "+prev)
		joined := grpcchain.Server(sis...)
		if n == 0 {
			if joined != nil {
				t.Fatal("no interceptor: want nil")
			}
			continue
		}
		handler := func(ctx context.Context, req any) (any, error) {
			got, _ := ctx.Value(step{}).(string)
			tr.seen = append(tr.seen, "handler after "+got)
			if req != "req" {
				t.Errorf("handler got %v", req)
			}
			return "resp", errFinal
		}
		ctx := context.WithValue(t.Context(), step{}, "server")
		for _, method := range []string{"/s/m", "/s/m"} {
			tr.seen = nil
			resp, err := joined(ctx, "req", &grpc.UnaryServerInfo{FullMethod: method}, handler)
			if err != errFinal || resp != wantResp {
				t.Fatalf("%d interceptors: %v, %v; want %q", n, resp, err, wantResp)
			}
			if !slices.Equal(tr.seen, want) {
				t.Errorf("%d interceptors:\n got %q\nwant %q", n, tr.seen, want)
			}
		}
	}
}

// TestServerCancelPropagates: a context derived beneath the joined chain is
// cancelled with the call's.
func TestServerCancelPropagates(t *testing.T) {
	pass := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return handler(ctx, req)
	}
	ctx, cancel := context.WithCancel(t.Context())
	joined := grpcchain.Server(pass, pass)
	_, _ = joined(ctx, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
		child, stop := context.WithCancel(ctx)
		defer stop()
		cancel()
		<-child.Done()
		return nil, nil
	})
}

// TestAllocs: a joined chain of five client interceptors and of four server
// interceptors allocates one context per call, where grpc-go's chains make a
// closure per interceptor but the last.
func TestAllocs(t *testing.T) {
	pc := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	ps := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return handler(ctx, req)
	}
	client := grpcchain.Client(pc, pc, pc, pc, pc)
	server := grpcchain.Server(ps, ps, ps, ps)
	final := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	handler := func(context.Context, any) (any, error) { return nil, nil }
	info := &grpc.UnaryServerInfo{}
	ctx := t.Context()
	if n := testing.AllocsPerRun(100, func() { _ = client(ctx, "/s/m", nil, nil, nil, final) }); n != 1 {
		t.Errorf("client: %v allocations per call, want 1", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = server(ctx, nil, info, handler) }); n != 1 {
		t.Errorf("server: %v allocations per call, want 1", n)
	}
}

// TestTakeCallState: the first layer of a joined client chain to ask gets the
// call's state, the same on every attempt it makes; a second asker gets none, as
// does a call outside a joined chain; a call made beneath, through a chain of its
// own, gets its own.
func TestTakeCallState(t *testing.T) {
	if grpcchain.TakeCallState(t.Context()) != nil {
		t.Error("a state outside a joined chain")
	}
	var first, second, nested *grpcchain.CallState
	taker := func(into **grpcchain.CallState) grpc.UnaryClientInterceptor {
		return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			*into = grpcchain.TakeCallState(ctx)
			return invoker(ctx, method, req, reply, cc, opts...)
		}
	}
	inner := grpcchain.Client(taker(&nested), taker(new(*grpcchain.CallState)))
	calling := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		final := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
		if err := inner(ctx, "/inner", nil, nil, nil, final); err != nil {
			return err
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	final := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	outer := grpcchain.Client(taker(&first), calling, taker(&second))
	seen := map[*grpcchain.CallState]bool{}
	for range 2 {
		if err := outer(t.Context(), "/outer", nil, nil, nil, final); err != nil {
			t.Fatal(err)
		}
		if first == nil || second != nil || nested == nil || nested == first {
			t.Fatalf("first %p, second %p, nested %p: want the first and the nested call's own, none for the second", first, second, nested)
		}
		if seen[first] {
			t.Error("a call's state reused by the next call")
		}
		seen[first] = true
	}
}
