// Package grpc is the part of google.golang.org/grpc's API the analyzer's tests
// call, with the same import path and signatures.
package grpc

import "context"

type CallOption interface{ before() }
type DialOption interface{ apply() }

type StreamDesc struct{ StreamName string }

type ClientStream interface {
	Context() context.Context
	SendMsg(m any) error
	RecvMsg(m any) error
}

type ServerStream interface {
	SetHeader(md map[string][]string) error
	SendHeader(md map[string][]string) error
	Context() context.Context
	SendMsg(m any) error
	RecvMsg(m any) error
}

type ClientConnInterface interface {
	Invoke(ctx context.Context, method string, args any, reply any, opts ...CallOption) error
	NewStream(ctx context.Context, desc *StreamDesc, method string, opts ...CallOption) (ClientStream, error)
}

type ClientConn struct{}

func (*ClientConn) Invoke(ctx context.Context, method string, args any, reply any, opts ...CallOption) error {
	return nil
}

func (*ClientConn) NewStream(ctx context.Context, desc *StreamDesc, method string, opts ...CallOption) (ClientStream, error) {
	return nil, nil
}

func (*ClientConn) Close() error { return nil }

type UnaryInvoker func(ctx context.Context, method string, req, reply any, cc *ClientConn, opts ...CallOption) error
type UnaryClientInterceptor func(ctx context.Context, method string, req, reply any, cc *ClientConn, invoker UnaryInvoker, opts ...CallOption) error

func NewClient(target string, opts ...DialOption) (*ClientConn, error)  { return &ClientConn{}, nil }
func WithDefaultServiceConfig(s string) DialOption                      { return nil }
func WithUnaryInterceptor(f UnaryClientInterceptor) DialOption          { return nil }
func WithChainUnaryInterceptor(fs ...UnaryClientInterceptor) DialOption { return nil }
func WithTransportCredentials(c any) DialOption                         { return nil }
