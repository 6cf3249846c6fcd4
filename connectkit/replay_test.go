package connectkit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/dedup"
)

// wireOf is one HTTP response as the client's transport received it.
type wireOf struct {
	header, trailer http.Header
	body            []byte
}

// recorder is an http.RoundTripper that keeps the last response it passed on,
// read to its end (a unary answer is small), with its trailers.
type recorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	last wireOf
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	r.mu.Lock()
	r.last = wireOf{header: resp.Header.Clone(), trailer: resp.Trailer.Clone(), body: body}
	r.mu.Unlock()
	return resp, nil
}

func (r *recorder) take() wireOf {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// answer is what a connect client's caller read from one call.
type answer struct {
	msg             string
	header, trailer http.Header // a response's
	code            connect.Code
	message         string
	meta            http.Header // an error's
	details         []string    // an error's: type and bytes
	wire            wireOf
}

func readAnswer(resp *connect.Response[msg], err error, w wireOf) answer {
	a := answer{wire: w}
	if err == nil {
		a.msg, a.header, a.trailer = resp.Msg.GetValue(), resp.Header(), resp.Trailer()
		return a
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		a.message = "not a connect error: " + err.Error()
		return a
	}
	a.code, a.message, a.meta = ce.Code(), ce.Message(), ce.Meta()
	for _, d := range ce.Details() {
		a.details = append(a.details, d.Type()+"="+string(d.Bytes()))
	}
	return a
}

// withoutReplayMarker returns a copy of a without the Idempotent-Replayed header
// and without the Date header of the response (the one per-connection header
// connect-go and net/http write), and whether a was marked replayed: the header
// says "true" in the response's header as the transport received it, or, when the
// wire was not recorded, in what the caller read (a response's header, an error's
// metadata).
func withoutReplayMarker(a answer) (answer, bool) {
	marked := a.wire.header.Get(dedup.ReplayedHeader) == "true"
	if a.wire.header == nil {
		marked = a.header.Get(dedup.ReplayedHeader) == "true" || a.meta.Get(dedup.ReplayedHeader) == "true"
	}
	strip := func(h http.Header) http.Header {
		h = h.Clone()
		h.Del(dedup.ReplayedHeader)
		h.Del("Date")
		return h
	}
	a.header, a.trailer, a.meta = strip(a.header), strip(a.trailer), strip(a.meta)
	a.wire.header, a.wire.trailer = strip(a.wire.header), strip(a.wire.trailer)
	return a, marked
}

// sharedDecline is one error value a handler answers to every call: what the
// layers store of it must not change it.
var sharedDecline = func() *connect.Error {
	ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("declined"))
	ce.Meta().Set("X-Decline", "shared")
	return ce
}()

// replayCase is one way a handler answers: answer is its answer to its i-th run.
type replayCase struct {
	name   string
	answer func(i int64) (*connect.Response[msg], error)
}

// replayCases are the answers whose replays the tests compare with the first.
func replayCases(t *testing.T) []replayCase {
	unknownDetail := func() *connect.ErrorDetail {
		d, err := connect.NewErrorDetail(&anypb.Any{TypeUrl: "type.googleapis.com/acme.v1.Unregistered", Value: []byte{0x08, 0x2a}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}()
	return []replayCase{
		{"response", func(i int64) (*connect.Response[msg], error) {
			resp := connect.NewResponse(wrapperspb.String(fmt.Sprint("charge ", i)))
			resp.Header().Set("X-Both", fmt.Sprint("resp-", i))
			resp.Header().Set("X-Resp", fmt.Sprint(i))
			resp.Trailer().Set("X-Both-T", fmt.Sprint("resp-", i))
			resp.Trailer().Set("X-Resp-T", fmt.Sprint(i))
			return resp, nil
		}},
		{"connect error", func(i int64) (*connect.Response[msg], error) {
			ce := connect.NewError(connect.CodePermissionDenied, fmt.Errorf("denied %d", i))
			ce.Meta().Set("X-Both", fmt.Sprint("err-", i))
			ce.Meta().Set("X-Err", fmt.Sprint(i))
			d, err := connect.NewErrorDetail(wrapperspb.String(fmt.Sprint("detail ", i)))
			if err != nil {
				return nil, err
			}
			ce.AddDetail(d)
			ce.AddDetail(unknownDetail)
			return nil, ce
		}},
		{"wrapped connect error", func(i int64) (*connect.Response[msg], error) {
			return nil, fmt.Errorf("charge %d: %w", i, connect.NewError(connect.CodeNotFound, fmt.Errorf("no account %d", i)))
		}},
		{"shared connect error", func(int64) (*connect.Response[msg], error) { return nil, sharedDecline }},
		{"relayed wire error", func(i int64) (*connect.Response[msg], error) {
			// An error as a connect client returns it: its metadata (the
			// downstream's) is not sent on.
			we := connect.NewWireError(connect.CodeAborted, fmt.Errorf("downstream %d", i))
			we.Meta().Set("X-Downstream", fmt.Sprint(i))
			return nil, we
		}},
		{"grpc-go status", func(i int64) (*connect.Response[msg], error) {
			return nil, status.Error(codes.PermissionDenied, fmt.Sprint("no ", i))
		}},
		{"plain error", func(i int64) (*connect.Response[msg], error) { return nil, fmt.Errorf("ledger %d down", i) }},
		{"unmarshallable response", func(i int64) (*connect.Response[msg], error) {
			resp := connect.NewResponse(wrapperspb.String("charge \xff"))
			resp.Header().Set("X-Resp", fmt.Sprint(i))
			resp.Trailer().Set("X-Resp-T", fmt.Sprint(i))
			return resp, nil
		}},
	}
}

// checkReplays runs each case under dedup in each protocol, with a handler that
// also sets header and trailer metadata through connect's CallInfo when callInfo
// is set, and compares each repeat with its key's first answer as the caller read
// it, and, when wire is set, as the client's transport received it, byte for byte:
// the header (Date aside), the body and the trailer. The Idempotent-Replayed
// header must be on the repeats (on the wire, in the header), never on a first
// answer.
func checkReplays(t *testing.T, callInfo, wire bool) {
	for _, p := range protocols {
		for _, tc := range replayCases(t) {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				var n atomic.Int64
				url, hc := serve(t, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
					i := n.Add(1)
					if callInfo {
						info, ok := connect.CallInfoForHandlerContext(ctx)
						if !ok {
							return nil, errors.New("no CallInfo")
						}
						info.ResponseHeader().Add("X-Call", fmt.Sprint("call-", i))
						info.ResponseHeader().Add("X-Both", fmt.Sprint("call-", i))
						info.ResponseTrailer().Add("X-Call-T", fmt.Sprint("call-", i))
						info.ResponseTrailer().Add("X-Both-T", fmt.Sprint("call-", i))
					}
					return tc.answer(i)
				}, connectkit.HandlerOption(deadlinekit.WithDedup(dedup.NewMemoryStore())))
				rec := &recorder{base: hc.Transport}
				c := client(&http.Client{Transport: rec}, url, procPost, p.opt)
				call := func(key string) answer {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					req := connect.NewRequest(wrapperspb.String("100"))
					req.Header().Set("Idempotency-Key", key)
					resp, err := c.CallUnary(ctx, req)
					a := readAnswer(resp, err, rec.take())
					if !wire {
						a.wire = wireOf{}
					}
					return a
				}
				// Each key's first answer, then its repeats; the shared error is
				// answered under two keys, two executions that must not see
				// each other's metadata.
				keys := []string{"k1", "k1", "k1"}
				if tc.name == "shared connect error" {
					keys = append(keys, "k2", "k2")
				}
				firsts := map[string]answer{}
				for i, key := range keys {
					got, marked := withoutReplayMarker(call(key))
					first, seen := firsts[key]
					if !seen {
						firsts[key] = got
						if callInfo && wire && got.wire.header.Get("X-Call") != fmt.Sprint("call-", len(firsts)) {
							t.Fatalf("call %d (%s): the CallInfo header is not on the wire: %+v", i+1, key, got.wire)
						}
					} else if !reflect.DeepEqual(got, first) {
						t.Errorf("call %d (%s), a repeat:\n got %+v\nwant %+v", i+1, key, got, first)
					}
					if marked != seen {
						t.Errorf("call %d (%s): marked replayed %v, want %v", i+1, key, marked, seen)
					}
				}
				if want := int64(len(firsts)); n.Load() != want {
					t.Errorf("handler ran %d times, want %d", n.Load(), want)
				}
				if got := sharedDecline.Meta(); len(got) != 1 || len(got["X-Decline"]) != 1 {
					t.Errorf("the shared error's metadata changed: %v", got)
				}
				if d := firsts["k2"].meta; d != nil && !reflect.DeepEqual(d.Values("X-Decline"), []string{"shared"}) {
					t.Errorf("the second execution's answer carries X-Decline %q", d.Values("X-Decline"))
				}
			})
		}
	}
}

// TestDedupReplayKeepsCallInfoMetadata: the header and trailer metadata a connect
// handler sets through connect.CallInfoForHandlerContext reach a repeat as they
// reached the first caller, each where the first caller got it, next to the
// metadata set on the response or carried by the error, and the repeat gets, on
// the wire, byte for byte, what the first caller got (the Idempotent-Replayed
// header aside), in the Connect, gRPC and gRPC-Web protocols.
func TestDedupReplayKeepsCallInfoMetadata(t *testing.T) { checkReplays(t, true, true) }

// TestDedupReplayStatusAsSent: a repeat gets the status the first caller received
// as connect-go sent it: a *connect.Error's code, message and details (a type this
// program does not know included), anywhere in the error's chain; a grpc-go status
// error or any other error as Unknown with its text; the error's metadata unless
// it came off the wire (a downstream's error, relayed), as connect-go sends it.
func TestDedupReplayStatusAsSent(t *testing.T) { checkReplays(t, false, false) }

// TestDedupReplayOuterCallInfo: metadata an interceptor outside the stack sets
// through CallInfo before the call reaches dedup is set again for each repeat (a
// request id), and is not part of the stored answer: a repeat gets its own value
// once, not the first's as well.
func TestDedupReplayOuterCallInfo(t *testing.T) {
	var ids atomic.Int64
	outer := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if info, ok := connect.CallInfoForHandlerContext(ctx); ok {
				info.ResponseHeader().Set("X-Request-Id", fmt.Sprint(ids.Add(1)))
			}
			return next(ctx, req)
		}
	})
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			ids.Store(0)
			url, hc := serve(t, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
				info, _ := connect.CallInfoForHandlerContext(ctx)
				info.ResponseHeader().Add("X-Request-Id", "handler")
				return connect.NewResponse(wrapperspb.String("ok")), nil
			}, connect.WithInterceptors(outer), connectkit.HandlerOption(deadlinekit.WithDedup(dedup.NewMemoryStore())))
			c := client(hc, url, procPost, p.opt)
			for i := range 2 {
				req := connect.NewRequest(wrapperspb.String("100"))
				req.Header().Set("Idempotency-Key", "k")
				resp, err := c.CallUnary(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := resp.Header().Values("X-Request-Id"), []string{fmt.Sprint(i + 1), "handler"}; !reflect.DeepEqual(got, want) {
					t.Errorf("call %d: X-Request-Id %q, want %q", i+1, got, want)
				}
			}
		})
	}
}
