// Package rpc describes a unary call in the terms every framework that speaks gRPC's
// status codes shares (a procedure, request metadata, a status and the metadata of
// the answer), so that the layer packages can run their cores under a framework they
// do not import. Each layer registers its adapters here in its init function; the
// framework's package (connectkit, for connect-go) looks them up by layer and
// translates its calls. The layer packages never import a framework: a program that
// does not use one does not compile it.
package rpc

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Call is one unary call, as the client layers see it.
type Call struct {
	Procedure string // the full method, "/pkg.Service/Method"
	// Target names the downstream ("host:port"), for per-target state (a breaker's
	// circuit).
	Target string
	// Idempotent is true when the framework declares the procedure safe to run twice
	// (connect-go's Spec.IdempotencyLevel); the layers' own knowledge (declared
	// methods, the proto registry, an idempotency key) is added to it.
	Idempotent bool
	// ServerStreams is true for a stream on which the server sends a stream of
	// messages (server streaming, bidi).
	ServerStreams bool
	// Copy, when not nil, returns a send of a copy of the call's request taken as
	// Copy is called, which reads nothing the caller may change (connectkit: the
	// request's header and message) when it is called, once, later. The send a
	// layer is given reads the caller's request as it sends: a layer that sends a
	// copy on a goroutine of its own, which may still run once the call has
	// returned (hedge: a loser), takes the copy with Copy while the call is
	// undecided, since the caller may change its request and send it again once
	// the call has returned.
	Copy func() Send
}

// Answer is what an attempt, or a whole call, came back with.
type Answer struct {
	Resp any   // the framework's response; nil when Err is set
	Err  error // nil, or an error whose gRPC status (status.FromError) is the answer's
	// Meta is the answer's metadata, headers and trailers, with lower-case keys
	// (grpc-retry-pushback-ms).
	Meta metadata.MD
	// Unsent is true when the attempt provably never left the client (no byte of its
	// request was written): the server cannot have run it.
	Unsent bool
}

// Send sends one attempt of a call under ctx. What the layers add to the attempt's
// request header is in ctx's outgoing metadata (metadata.FromOutgoingContext), as
// for a gRPC call: the framework's adapter copies it into the request it sends.
type Send func(ctx context.Context) Answer

// Client is one client layer: it sends a call through send once, several times, or
// not at all.
type Client func(ctx context.Context, c *Call, send Send) Answer

// StreamClient is a client layer's part in a stream: it is given the stream's
// context before the stream opens, and returns the stream's context and the function
// to call with its outcome when it ends (nil: it ended well), or the error that
// refuses it.
type StreamClient func(ctx context.Context, c *Call) (context.Context, func(error), error)

// StreamAdmit is a client layer's admission of a stream, when the stream is about to
// send (its target is known then, and nothing has gone out): it returns what the
// stream reports to the layer, or the error that refuses the stream.
type StreamAdmit func(ctx context.Context, c *Call) (StreamReport, error)

// StreamReport is what an admitted stream tells the layer that admitted it.
type StreamReport struct {
	// Answered is called when the stream's first message arrives (more calls are
	// allowed, and ignored).
	Answered func()
	// End is called once with the stream's outcome (nil: it ended well).
	End func(error)
}

// Layer is one layer's adapters; a nil field is a side the layer does not have.
type Layer struct {
	Client      Client
	Stream      StreamClient
	StreamAdmit StreamAdmit
	Server      Server
	// Resends is true for a client layer that may send a call more than once, or
	// several copies at once (retry, hedge): each send needs a request of its own.
	Resends bool
	// Stamps are the outgoing metadata keys a client layer sets, or removes, in
	// the context of each send and of each stream it opens (propagate: the
	// level, deadlinekit-criticality): the adapter makes the request sent carry
	// exactly their values there, the layer's own, even when it does not resend.
	Stamps []string
}

// Inbound is one call a server received.
type Inbound struct {
	Procedure string      // the full method
	Header    http.Header // the request's headers
	Stream    bool        // a streaming call: its handler's life is the stream's
	// Req is a unary call's request message, and Reply the framework's way to take
	// its response apart and make one again, for a layer that stores answers
	// (dedup); nil when the framework does not give them.
	Req   any
	Reply Reply
}

// Reply takes a framework's unary responses apart and makes them again, and reads
// and adds to the metadata of the call a handler serves, for a layer that stores
// answers (dedup) and must give a repeat what the first caller received on the
// wire. None of its methods changes a response or an error it is given: a handler
// may answer the same error value to every call.
type Reply interface {
	// Split returns the message of resp, a response to procedure, and the header
	// and trailer metadata set on it;
	// ok is false for a response it cannot take apart.
	Split(procedure string, resp any) (msg any, header, trailer metadata.MD, ok bool)
	// Make returns a response of the procedure's type carrying msg, header and
	// trailer; ok is false when it cannot make one (it does not know the type yet).
	Make(procedure string, msg any, header, trailer metadata.MD) (resp any, ok bool)
	// Status returns the status the caller of the call in ctx receives for its
	// handler's error err, read as the framework sends it (an error without a
	// status of the framework's own included), and the metadata err carries to
	// that caller, in the header or the trailer as the call's protocol sends it.
	Status(ctx context.Context, err error) (st *status.Status, header, trailer metadata.MD)
	// ErrorMetaInTrailer reports whether the call in ctx sends an error's metadata in
	// its trailer (the gRPC protocols) rather than its header (Connect).
	ErrorMetaInTrailer(ctx context.Context) bool
	// CallMeta returns a copy of the header and trailer metadata set so far for
	// the call in ctx apart from its response and its error (connect-go: through
	// the call's CallInfo), which the caller receives ahead of a response's or an
	// error's own; nil when there is none.
	CallMeta(ctx context.Context) (header, trailer metadata.MD)
	// AddCallMeta adds header and trailer to the metadata of the call in ctx that
	// CallMeta reads, so that its caller receives them with whatever the call
	// answers, a response or an error.
	AddCallMeta(ctx context.Context, header, trailer metadata.MD)
}

// Handle runs the rest of the server chain and the handler.
type Handle func(ctx context.Context) (any, error)

// Server is one server layer around a handler. A refusal is a *Refusal.
type Server func(ctx context.Context, in *Inbound, handle Handle) (any, error)

// Refusal is a server layer's answer that the handler did not run (or whose error
// it mapped): a gRPC status, and the metadata the answer carries
// (grpc-retry-pushback-ms).
type Refusal struct {
	Err  error // has the gRPC status (status.FromError)
	Meta metadata.MD
}

func (r *Refusal) Error() string { return r.Err.Error() }
func (r *Refusal) Unwrap() error { return r.Err }

var (
	mu       sync.RWMutex
	adapters = map[string]any{}
)

// Register makes f the adapter named name: a layer's name and its constructor, from
// the layer's options to a [Layer] ("retry", func([]retry.Option) Layer). Layer
// packages call it from init.
func Register[A any](name string, f A) {
	mu.Lock()
	defer mu.Unlock()
	adapters[name] = f
}

// Lookup returns the adapter named name, of type A. It panics when none is
// registered under that name and type: the framework package imports the layer
// packages whose adapters it uses, so their init functions have run.
func Lookup[A any](name string) A {
	mu.RLock()
	defer mu.RUnlock()
	f, ok := adapters[name].(A)
	if !ok {
		panic(fmt.Sprintf("rpc: no adapter %q of type %T registered", name, f))
	}
	return f
}
