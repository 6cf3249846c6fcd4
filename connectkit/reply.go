package connectkit

import (
	"errors"
	"net/http"
	"reflect"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

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

func (r *reply) Status(err error) (*status.Status, metadata.MD) {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return (&wireError{ce: ce}).GRPCStatus(), lowerKeys(ce.Meta())
	}
	return status.Convert(err), nil
}
