// Package connect is the part of connectrpc.com/connect's API the analyzer's
// tests call, with the same import path and signatures.
package connect

import (
	"context"
	"net/http"
)

type Request[T any] struct{ Msg *T }
type Response[T any] struct{ Msg *T }

func NewRequest[T any](msg *T) *Request[T] { return &Request[T]{Msg: msg} }

type HTTPClient interface {
	Do(*http.Request) (*http.Response, error)
}

type ClientOption interface{ applyToClient() }
type Interceptor interface{ wrap() }

func WithInterceptors(is ...Interceptor) ClientOption { return nil }

type Client[Req, Res any] struct{}

func NewClient[Req, Res any](c HTTPClient, url string, opts ...ClientOption) *Client[Req, Res] {
	return &Client[Req, Res]{}
}

func (*Client[Req, Res]) CallUnary(ctx context.Context, r *Request[Req]) (*Response[Res], error) {
	return nil, nil
}
