package connectkit

import (
	"context"
	"errors"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"syscall"

	"connectrpc.com/connect"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	spb "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/deadlinekit/deadlinekit/internal/rpc"
)

// replies takes connect responses apart and makes them again, for the layers that
// store answers (dedup). A connect handler answers a *connect.Response[T] whose T
// an interceptor cannot name: the type is learned, per procedure, from the first
// response taken apart on this server.
var replies = &reply{}

type reply struct{ types sync.Map } // procedure → reflect.Type of *connect.Response[T]

var _ rpc.Reply = (*reply)(nil)

func (r *reply) Split(procedure string, resp any) (any, metadata.MD, metadata.MD, bool) {
	ar, ok := resp.(connect.AnyResponse)
	if !ok || ar == nil || reflect.ValueOf(ar).IsNil() {
		return nil, nil, nil, false
	}
	if _, known := r.types.Load(procedure); !known {
		r.types.Store(procedure, reflect.TypeOf(ar))
	}
	return ar.Any(), lowerKeys(ar.Header()), lowerKeys(ar.Trailer()), true
}

func (r *reply) Make(procedure string, msg any, header, trailer metadata.MD) (any, bool) {
	t, ok := r.types.Load(procedure)
	if !ok {
		return nil, false
	}
	v := reflect.New(t.(reflect.Type).Elem())
	f := v.Elem().FieldByName("Msg")
	m := reflect.ValueOf(msg)
	if !f.IsValid() || !m.Type().AssignableTo(f.Type()) {
		return nil, false
	}
	f.Set(m)
	ar, ok := v.Interface().(connect.AnyResponse)
	if !ok {
		return nil, false
	}
	addAll(ar.Header(), header)
	addAll(ar.Trailer(), trailer)
	return ar, true
}

func addAll(h http.Header, md metadata.MD) {
	for k, vs := range md {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
}

// Status reads err as connect-go sends a handler's error ([sentError]): its code,
// message and details, and its metadata, which connect-go sends in the header in
// the Connect protocol and in the trailer in gRPC and gRPC-Web, and not at all for
// an error that came off the wire (a downstream's, relayed). err is not changed.
func (r *reply) Status(ctx context.Context, err error) (*status.Status, metadata.MD, metadata.MD) {
	ce := sentError(err)
	st := statusOf(ce)
	if connect.IsWireError(ce) {
		return st, nil, nil
	}
	md := copyMeta(ce.Meta())
	if r.ErrorMetaInTrailer(ctx) {
		return st, nil, md
	}
	return st, md, nil
}

// ErrorMetaInTrailer reports whether the call in ctx speaks gRPC or gRPC-Web, whose
// errors carry their metadata in the trailer (Connect's, in the header).
func (r *reply) ErrorMetaInTrailer(ctx context.Context) bool {
	info, ok := connect.CallInfoForHandlerContext(ctx)
	if !ok {
		return false
	}
	p := info.Peer().Protocol
	return p == connect.ProtocolGRPC || p == connect.ProtocolGRPCWeb
}

// CallMeta returns copies of what the call's CallInfo holds for its response
// header and trailer: what connect-go sends ahead of the response's or the error's
// own metadata.
func (r *reply) CallMeta(ctx context.Context) (metadata.MD, metadata.MD) {
	info, ok := connect.CallInfoForHandlerContext(ctx)
	if !ok {
		return nil, nil
	}
	return copyMeta(info.ResponseHeader()), copyMeta(info.ResponseTrailer())
}

// AddCallMeta adds header and trailer to the call's CallInfo, which connect-go
// sends with the call's response or error.
func (r *reply) AddCallMeta(ctx context.Context, header, trailer metadata.MD) {
	info, ok := connect.CallInfoForHandlerContext(ctx)
	if !ok {
		return
	}
	if len(header) > 0 {
		addAll(info.ResponseHeader(), header)
	}
	if len(trailer) > 0 {
		addAll(info.ResponseTrailer(), trailer)
	}
}

// copyMeta is h as metadata with lower-case keys, its values copied; keys without
// values (which connect-go does not send) are left out.
func copyMeta(h http.Header) metadata.MD {
	var md metadata.MD
	for k, vs := range h {
		if len(vs) == 0 {
			continue
		}
		if md == nil {
			md = make(metadata.MD, len(h))
		}
		k = strings.ToLower(k)
		md[k] = append(md[k], vs...)
	}
	return md
}

// sentError is err as connect-go sends a handler's error (wrapIfContextError, then
// the protocol's writer): the *connect.Error in err's chain; else, for a context
// error or a write that failed because the client left, Canceled or
// DeadlineExceeded; else Unknown. The two last carry err's text as their message,
// whatever else err is: connect-go knows nothing of a grpc-go status error, and
// sends it as Unknown "rpc error: code = ... desc = ...".
func sentError(err error) *connect.Error {
	var ce *connect.Error
	if errors.As(err, &ce) && ce != nil {
		return ce
	}
	code := connect.CodeUnknown
	switch {
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		code = connect.CodeDeadlineExceeded
	case clientLeft(err):
		code = connect.CodeCanceled
	}
	return connect.NewError(code, err)
}

// clientLeft reports whether err is a write that failed because the client went
// away, as connect-go recognizes one (isClientDisconnected).
func clientLeft(err error) bool {
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	msg := err.Error()
	return msg == "client disconnected" || msg == "http2: stream closed"
}

// statusOf is ce as a gRPC status: its code, its message, and its details as they
// go on the wire (type and bytes, whether or not this program knows the type).
// A detail's type URL is written with the usual type.googleapis.com/ prefix:
// connect-go gives the type's name only.
func statusOf(ce *connect.Error) *status.Status {
	sp := &spb.Status{Code: int32(ce.Code()), Message: ce.Message()}
	for _, d := range ce.Details() {
		sp.Details = append(sp.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
	}
	return status.FromProto(sp)
}
