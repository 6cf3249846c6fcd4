// Package deadlinekit is the part of the toolkit's root API the analyzer's tests
// call, with the same import path and signatures.
package deadlinekit

import (
	"net/http"

	"google.golang.org/grpc"
)

type Option interface{ apply() }
type Layer uint8

const (
	Propagate Layer = iota + 1
	ShortCircuit
	Retry
	Hedge
	Breaker
)

func Without(layers ...Layer) Option                                        { return nil }
func NewTransport(base http.RoundTripper, opts ...Option) http.RoundTripper { return base }
func DialOptions(opts ...Option) []grpc.DialOption                          { return nil }
