// Package grpcchain joins unary gRPC interceptors into one, for the root package's
// ServerOptions and DialOptions. grpc-go's own chains (grpc.ChainUnaryInterceptor,
// grpc.WithChainUnaryInterceptor) make, on every call, one closure for each
// interceptor but the last, which binds the rest of the chain to the call's final
// invoker or handler: four allocations per call for the client stack's five
// layers. The joined interceptor runs the same interceptors in the same order, each
// given the next as its invoker (handler); the links between them are made once,
// and the call's final invoker (handler) travels on the call's context, one
// allocation per call however many interceptors there are. A client call's context
// also has room for the state a layer keeps for the call ([TakeCallState]), which
// the layer then need not allocate.
//
// Every interceptor joined must call its invoker (handler) under the context it was
// given or one derived from it, as the toolkit's layers do: the last link reads the
// final invoker (handler) there.
package grpcchain

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Client returns ics joined into one client interceptor that runs them in order:
// ics[0] first, its invoker runs ics[1], and so on; the last one's invoker is the
// one the joined interceptor is given. One interceptor is returned as it is; none
// gives nil.
func Client(ics ...grpc.UnaryClientInterceptor) grpc.UnaryClientInterceptor {
	switch len(ics) {
	case 0:
		return nil
	case 1:
		return ics[0]
	}
	c := &clientChain{}
	// next[i] is the invoker of ics[i]: it runs ics[i+1], or, for the last, the
	// call's final invoker.
	next := make([]grpc.UnaryInvoker, len(ics))
	next[len(ics)-1] = func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		return ctx.Value(c).(*clientCall).final(ctx, method, req, reply, cc, opts...)
	}
	for i := len(ics) - 2; i >= 0; i-- {
		ic, inv := ics[i+1], next[i+1]
		next[i] = func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			return ic(ctx, method, req, reply, cc, inv, opts...)
		}
	}
	first, inv := ics[0], next[0]
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return first(&clientCall{Context: ctx, chain: c, final: invoker}, method, req, reply, cc, inv, opts...)
	}
}

// clientChain is a joined client chain, the context key of its calls' state: a
// pointer of its own per chain, so that a call made inside another call's chain
// (by an interceptor beneath it) finds its own.
type clientChain struct{ _ byte }

// clientCall is a call's context in a joined client chain, which carries its final
// invoker and the [CallState] a layer may take.
type clientCall struct {
	context.Context
	chain *clientChain
	final grpc.UnaryInvoker
	state CallState
}

// Value answers the call itself for its chain's key and for [TakeCallState]'s, and
// otherwise asks the context it was made from.
func (c *clientCall) Value(key any) any {
	switch k := key.(type) {
	case *clientChain:
		if k == c.chain {
			return c
		}
	case callStateKey:
		return c
	}
	return c.Context.Value(key)
}

// CallState is room for what a layer keeps for one unary call: the trailer and the
// header its attempts write, and the call options it sends them with (the retry
// layer's). It lives in the call's context in a joined client chain, which the
// chain allocates anyway: a layer that takes it ([TakeCallState]) allocates none of
// its own. Like the context, it is never reused: what a layer beneath keeps of the
// options (a hedge still starting when the call returns) stays the call's.
type CallState struct {
	Trailer, Header metadata.MD
	Opts            [5]grpc.CallOption
	taken           atomic.Bool
}

type callStateKey struct{}

// TakeCallState returns the [CallState] of the call of ctx in a joined client
// chain, to the first layer that asks; nil to any other, and outside such a chain.
func TakeCallState(ctx context.Context) *CallState {
	c, _ := ctx.Value(callStateKey{}).(*clientCall)
	if c == nil || !c.state.taken.CompareAndSwap(false, true) {
		return nil
	}
	return &c.state
}

// Server returns sis joined into one server interceptor that runs them in order:
// sis[0] first, its handler runs sis[1], and so on; the last one's handler is the
// one the joined interceptor is given. Each is given the call's info, as grpc-go's
// chain gives it. One interceptor is returned as it is; none gives nil.
func Server(sis ...grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	switch len(sis) {
	case 0:
		return nil
	case 1:
		return sis[0]
	}
	s := &serverChain{}
	// next[i] is the handler of sis[i]: it runs sis[i+1], or, for the last, the
	// call's final handler.
	next := make([]grpc.UnaryHandler, len(sis))
	next[len(sis)-1] = func(ctx context.Context, req any) (any, error) {
		return s.call(ctx).handler(ctx, req)
	}
	for i := len(sis) - 2; i >= 0; i-- {
		si, h := sis[i+1], next[i+1]
		next[i] = func(ctx context.Context, req any) (any, error) {
			return si(ctx, req, s.call(ctx).info, h)
		}
	}
	first, h := sis[0], next[0]
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return first(&serverCall{Context: ctx, chain: s, info: info, handler: handler}, req, info, h)
	}
}

// serverChain is a joined server chain, the context key of its calls' state: a
// pointer of its own per chain.
type serverChain struct{ _ byte }

// call returns the state of the call under ctx.
func (s *serverChain) call(ctx context.Context) *serverCall {
	return ctx.Value(s).(*serverCall)
}

// serverCall is a call's context in a joined server chain, which carries its info
// and final handler (one allocation for both, where a context value would take
// two).
type serverCall struct {
	context.Context
	chain   *serverChain
	info    *grpc.UnaryServerInfo
	handler grpc.UnaryHandler
}

// Value answers the call's state for its chain's key, and otherwise asks the
// context it was made from.
func (c *serverCall) Value(key any) any {
	if k, ok := key.(*serverChain); ok && k == c.chain {
		return c
	}
	return c.Context.Value(key)
}
