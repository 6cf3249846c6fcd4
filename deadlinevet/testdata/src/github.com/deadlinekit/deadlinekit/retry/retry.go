// Package retry is the part of the toolkit's retry API the analyzer's tests call.
package retry

import (
	"net/http"

	"google.golang.org/grpc"
)

type Option interface{ apply() }

func WithMaxAttempts(n int) Option                                          { return nil }
func NewTransport(base http.RoundTripper, opts ...Option) http.RoundTripper { return base }
func UnaryClientInterceptor(opts ...Option) grpc.UnaryClientInterceptor     { return nil }
