package exactlyonce_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/dedup"
)

// plan is what a logical request asks the handler to do; it travels as the request's
// body, so that every attempt of it has the same fingerprint.
type plan struct {
	// Kind: "ok", "fail4" (a 4xx / PermissionDenied), "fail5" (a 500 / Internal),
	// "big" (an answer above WithMaxResponseSize); and, on the key's first execution
	// only, "forget" (503 / Unavailable and dedup.Forget), "e504" (504 /
	// DeadlineExceeded), "panic". A later execution of those answers as "ok".
	Kind    string `json:"kind"`
	Work    int    `json:"work_ms"` // time the handler works before answering, within its deadline
	Size    int    `json:"size"`    // body size
	Trailer bool   `json:"trailer"` // the answer has a trailer
	Nonce   int    `json:"nonce"`   // makes one shared key's bodies differ between scopes
}

// tenantKey is the context key of the caller's tenant: the scope of its keys.
type tenantKey struct{}

func tenantOf(ctx context.Context) string {
	s, _ := ctx.Value(tenantKey{}).(string)
	return s
}

// service is one replica's handler, for both protocols.
type service struct {
	testgrpc.UnimplementedTestServiceServer
	h       recorder
	replica string
}

// outcome is what one execution does: its answer, or why it releases its key.
func (s *service) outcome(ctx context.Context, e *execution, p plan, grpcCodes bool) (answer, string) {
	kind := p.Kind
	if e.Nth > 0 && (kind == "forget" || kind == "e504" || kind == "panic") {
		kind = "ok"
	}
	if p.Work > 0 {
		t := time.NewTimer(time.Duration(p.Work) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if ctx.Err() == context.Canceled {
				return s.answer(e, p, kind, 499, codes.Canceled, grpcCodes), "499"
			}
			return s.answer(e, p, kind, 504, codes.DeadlineExceeded, grpcCodes), "deadline"
		}
	}
	switch kind {
	case "fail4":
		return s.answer(e, p, kind, 402, codes.PermissionDenied, grpcCodes), ""
	case "fail5":
		return s.answer(e, p, kind, 500, codes.Internal, grpcCodes), ""
	case "forget":
		dedup.Forget(ctx)
		return s.answer(e, p, kind, 503, codes.Unavailable, grpcCodes), "forget"
	case "e504":
		return s.answer(e, p, kind, 504, codes.DeadlineExceeded, grpcCodes), "504"
	case "panic":
		return answer{}, "panic"
	case "big":
		return s.answer(e, p, kind, 200, codes.OK, grpcCodes), ""
	}
	return s.answer(e, p, kind, 201, codes.OK, grpcCodes), ""
}

// answer builds the execution's answer: a body that names the execution, padded to
// the plan's size (one letter at least), the handler's headers and, when planned, a trailer.
func (s *service) answer(e *execution, p plan, kind string, httpStatus int, code codes.Code, grpcCodes bool) answer {
	head := fmt.Sprintf("exec=%d scope=%s key=%s kind=%s ", e.ID, e.Scope, e.Key, kind)
	body := []byte(head)
	// At least one letter after the head: an error's message travels in a header
	// over HTTP/1.1 (connect's gRPC-Web), whose values lose trailing spaces.
	for i := len(body); i < max(p.Size, len(head)+1); i++ {
		body = append(body, 'a'+byte((int(e.ID)+i)%26))
	}
	a := answer{Status: httpStatus, Body: body}
	if grpcCodes {
		a.Status = int(code)
		a.Header = map[string][]string{"x-app-exec": {strconv.FormatInt(e.ID, 10)}, "x-app-kind": {kind}}
		if p.Trailer {
			a.Trailer = map[string][]string{"x-app-trailer": {"t-" + strconv.FormatInt(e.ID, 10)}}
		}
		return a
	}
	a.Header = map[string][]string{"X-App-Exec": {strconv.FormatInt(e.ID, 10)}, "X-App-Kind": {kind},
		"Content-Type": {"text/plain; charset=utf-8"}}
	if p.Trailer {
		a.Trailer = map[string][]string{"X-App-Trailer": {"t-" + strconv.FormatInt(e.ID, 10)}}
	}
	return a
}

func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	var p plan
	if err == nil {
		err = json.Unmarshal(b, &p)
	}
	if err != nil {
		http.Error(w, "bad plan: "+fmt.Sprint(err), http.StatusBadRequest)
		return
	}
	key := strings.Trim(r.Header.Get("Idempotency-Key"), `"`)
	e := s.h.beginExec(r.Context(), tenantOf(r.Context()), key, "http", s.replica)
	a, released := s.outcome(r.Context(), e, p, false)
	s.h.endExec(e, a, released)
	if released == "panic" {
		panic(http.ErrAbortHandler)
	}
	h := w.Header()
	for k, v := range a.Header {
		h[k] = v
	}
	for k := range a.Trailer {
		h.Add("Trailer", k)
	}
	w.WriteHeader(a.Status)
	_, _ = w.Write(a.Body)
	for k, v := range a.Trailer {
		h[k] = v
	}
}

func (s *service) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	var p plan
	if err := json.Unmarshal(req.GetPayload().GetBody(), &p); err != nil {
		return nil, status.Error(codes.InvalidArgument, "bad plan: "+err.Error())
	}
	md, _ := metadata.FromIncomingContext(ctx)
	key := ""
	if vs := md.Get("idempotency-key"); len(vs) > 0 {
		key = strings.Trim(vs[0], `"`)
	}
	e := s.h.beginExec(ctx, tenantOf(ctx), key, "grpc", s.replica)
	a, released := s.outcome(ctx, e, p, true)
	s.h.endExec(e, a, released)
	if released == "panic" {
		panic("exactlyonce: the planned panic")
	}
	if a.Header != nil {
		_ = grpc.SetHeader(ctx, metadata.MD(a.Header))
	}
	if a.Trailer != nil {
		_ = grpc.SetTrailer(ctx, metadata.MD(a.Trailer))
	}
	if codes.Code(a.Status) != codes.OK {
		return nil, status.Error(codes.Code(a.Status), string(a.Body))
	}
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: a.Body}}, nil
}
