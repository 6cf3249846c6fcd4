package deadlinekit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

const pushbackHeader = "Grpc-Retry-Pushback-Ms"

// wireStream stands for grpc-go's server stream in a handler's context, so that
// grpc.SetTrailer works without a server.
type wireStream struct{ trailer metadata.MD }

func (s *wireStream) Method() string               { return "/wiretest.Relay/Call" }
func (s *wireStream) SetHeader(metadata.MD) error  { return nil }
func (s *wireStream) SendHeader(metadata.MD) error { return nil }
func (s *wireStream) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

// handlerContext returns a context like a gRPC handler's and the stream its trailer
// lands on.
func handlerContext() (context.Context, *wireStream) {
	s := &wireStream{}
	return grpc.NewContextWithServerTransportStream(context.Background(), s), s
}

// overTheWire sends a handler's error as grpc-go would: its status, marshalled and
// read back, as the client's error.
func overTheWire(t *testing.T, err error) error {
	t.Helper()
	b, merr := proto.Marshal(status.Convert(err).Proto())
	if merr != nil {
		t.Fatal(merr)
	}
	p := new(spb.Status)
	if uerr := proto.Unmarshal(b, p); uerr != nil {
		t.Fatal(uerr)
	}
	return status.FromProto(p).Err()
}

func retryInfo(t *testing.T, err error) (time.Duration, bool) {
	t.Helper()
	d, found, perr := pushback.RetryInfoDelay(status.Convert(err))
	if perr != nil {
		t.Fatalf("RetryInfo: %v", perr)
	}
	return d, found
}

// Every row of DESIGN's error table and the cases around them, towards the wire: the
// HTTP answer (status, body, headers) and the gRPC answer (code, message, trailer).
func TestErrorToWire(t *testing.T) {
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	_, malformed := propagate.DecodeGRPCTimeout("1x")
	// propagate's client floor, refused before anything is sent.
	var floorRefusal error
	{
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		floorRefusal = propagate.UnaryClientInterceptor(propagate.WithFloor(time.Hour))(ctx, "/x.Y/Z", nil, nil, nil,
			func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
				t.Error("the refused call was sent")
				return nil
			})
	}
	var httpFloorRefusal error
	{
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		rt := propagate.NewTransport(testkit.RoundTripFunc(func(*http.Request) (*http.Response, error) {
			t.Error("the refused request was sent")
			return nil, errors.New("sent")
		}), propagate.WithFloor(time.Hour))
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://c.invalid/", nil)
		httpFloorRefusal = deadlinekit.FromHTTP(rt.RoundTrip(req))
	}
	unavailable := status.Error(codes.Unavailable, "c is down")
	withInfo, _ := status.New(codes.ResourceExhausted, "quota").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(3 * time.Second)})

	for _, tc := range []struct {
		name       string
		err        error
		status     int
		code       codes.Code
		msg        string // exact, or a prefix when it ends with "…"
		pushbackMs string // header and trailer grpc-retry-pushback-ms; "" for none
		retryAfter string
		info       time.Duration // google.rpc.RetryInfo's delay; 0 for none
	}{
		{name: "budget below the floor", err: &deadline.BudgetError{Remaining: 7912345, Needed: 20 * time.Millisecond},
			status: 504, code: codes.DeadlineExceeded, msg: "deadlinekit: insufficient time budget: 7.9ms left, need 20ms", pushbackMs: "-1"},
		{name: "budget spent", err: &deadline.BudgetError{Remaining: -1500 * time.Microsecond},
			status: 504, code: codes.DeadlineExceeded, msg: "deadlinekit: insufficient time budget: deadline passed 1.5ms ago, need 0s", pushbackMs: "-1"},
		{name: "shortcircuit.Check mid-handler", err: shortcircuit.Check(expired, 20*time.Millisecond),
			status: 504, code: codes.DeadlineExceeded, msg: "deadlinekit: insufficient time budget: deadline passed …", pushbackMs: "-1"},
		{name: "propagate's gRPC floor, before sending", err: floorRefusal,
			status: 504, code: codes.DeadlineExceeded, msg: "propagate: insufficient time budget: …", pushbackMs: "-1"},
		{name: "propagate's HTTP floor, before sending", err: httpFloorRefusal,
			status: 504, code: codes.DeadlineExceeded, msg: "deadlinekit: insufficient time budget: …", pushbackMs: "-1"},
		{name: "retry: no time for another attempt", err: &retry.StopError{Attempts: 1, Cause: deadline.ErrInsufficientBudget, Remaining: time.Millisecond, Wait: 20 * time.Millisecond, Last: unavailable},
			status: 504, code: codes.DeadlineExceeded, msg: "c is down; not retried: 1ms left, the backoff asks 20ms", pushbackMs: "-1"},
		{name: "deadline passed", err: context.DeadlineExceeded,
			status: 504, code: codes.DeadlineExceeded, msg: "context deadline exceeded"},
		{name: "HTTP client's deadline", err: &url.Error{Op: "Get", URL: "http://c", Err: context.DeadlineExceeded},
			status: 504, code: codes.DeadlineExceeded, msg: `Get "http://c": context deadline exceeded`},
		{name: "caller cancelled", err: context.Canceled,
			status: 499, code: codes.Canceled, msg: "context canceled"},
		{name: "caller cancelled, wrapped", err: fmt.Errorf("calling C: %w", context.Canceled),
			status: 499, code: codes.Canceled, msg: "calling C: context canceled"},
		{name: "retry: cancelled while waiting", err: &retry.StopError{Attempts: 1, Reason: "context ended while waiting to retry", Cause: context.Canceled, Last: unavailable},
			status: 499, code: codes.Canceled, msg: "c is down; not retried: context ended while waiting to retry"},
		{name: "malformed inbound deadline header", err: malformed,
			status: 400, code: codes.InvalidArgument, msg: `deadlinekit: malformed Grpc-Timeout header "1x": …`},
		{name: "overloaded, come back", err: &deadlinekit.WireError{Code: codes.ResourceExhausted, Message: "busy", Pushback: 2 * time.Second},
			status: 503, code: codes.ResourceExhausted, msg: "busy", pushbackMs: "2000", retryAfter: "2", info: 2 * time.Second},
		{name: "overloaded, HTTP terms, rounded up", err: &deadlinekit.WireError{HTTPStatus: 503, Pushback: 1500 * time.Millisecond},
			status: 503, code: codes.ResourceExhausted, msg: "deadlinekit: ResourceExhausted (HTTP 503)", pushbackMs: "1500", retryAfter: "2", info: 1500 * time.Millisecond},
		{name: "downstream already retried", err: &deadlinekit.WireError{HTTPStatus: 503, Message: "c gave up", Pushback: -1},
			status: 503, code: codes.Unavailable, msg: "c gave up", pushbackMs: "-1"},
		{name: "gRPC status", err: unavailable,
			status: 503, code: codes.Unavailable, msg: "c is down"},
		{name: "gRPC ResourceExhausted with RetryInfo", err: withInfo.Err(),
			status: 503, code: codes.ResourceExhausted, msg: "quota", pushbackMs: "3000", retryAfter: "3", info: 3 * time.Second},
		{name: "gRPC ResourceExhausted, a quota", err: status.Error(codes.ResourceExhausted, "quota"),
			status: 429, code: codes.ResourceExhausted, msg: "quota"},
		{name: "retries exhausted, gRPC", err: &retry.StopError{Attempts: 3, Cause: retry.ErrBudgetExhausted, Last: status.Error(codes.NotFound, "no such cart")},
			status: 404, code: codes.NotFound, msg: "no such cart; stopped after 3 attempts: retry budget exhausted"},
		{name: "retries exhausted, HTTP", err: &retry.StopError{Attempts: 3, Cause: retry.ErrBudgetExhausted, Last: &retry.StatusError{StatusCode: 503, Status: "503 Service Unavailable"}},
			status: 503, code: codes.Unavailable, msg: "HTTP 503 Service Unavailable; stopped after 3 attempts: retry budget exhausted"},
		{name: "retry budget spent on an overload, HTTP", err: &retry.StopError{Attempts: 1, Cause: retry.ErrBudgetExhausted, Last: &retry.StatusError{StatusCode: 503, Status: "503 Service Unavailable",
			Header: http.Header{"Retry-After": {"1"}, "Grpc-Retry-Pushback-Ms": {"20"}}}},
			status: 503, code: codes.ResourceExhausted, msg: "HTTP 503 Service Unavailable; not retried: retry budget exhausted", pushbackMs: "20", retryAfter: "1", info: 20 * time.Millisecond},
		{name: "retry: pushback over the cap keeps the last answer", err: &retry.StopError{Attempts: 1, Reason: "server pushback 1h0m0s exceeds the cap of 10s",
			Last: &deadlinekit.WireError{HTTPStatus: 503, Message: "later", Pushback: time.Hour}},
			status: 503, code: codes.ResourceExhausted, msg: "later; not retried: server pushback 1h0m0s exceeds the cap of 10s", pushbackMs: "3600000", retryAfter: "3600", info: time.Hour},
		{name: "connection refused", err: &url.Error{Op: "Get", URL: "http://c", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}},
			status: 502, code: codes.Unavailable, msg: `Get "http://c": dial tcp: connection refused`},
		{name: "anything else", err: errors.New("boom"),
			status: 500, code: codes.Unknown, msg: "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("the row's error is nil")
			}
			checkMsg := func(what, got string) {
				t.Helper()
				if p, ok := strings.CutSuffix(tc.msg, "…"); ok {
					if !strings.HasPrefix(got, p) {
						t.Errorf("%s message %q; want it to start with %q", what, got, p)
					}
				} else if got != tc.msg {
					t.Errorf("%s message %q; want %q", what, got, tc.msg)
				}
			}
			if got := deadlinekit.HTTPStatus(tc.err); got != tc.status {
				t.Errorf("HTTPStatus = %d; want %d", got, tc.status)
			}

			w := httptest.NewRecorder()
			deadlinekit.WriteHTTPError(w, tc.err)
			if w.Code != tc.status {
				t.Errorf("written status %d; want %d", w.Code, tc.status)
			}
			checkMsg("HTTP", strings.TrimSuffix(w.Body.String(), "\n"))
			if got := w.Header().Get(pushbackHeader); got != tc.pushbackMs {
				t.Errorf("header grpc-retry-pushback-ms %q; want %q", got, tc.pushbackMs)
			}
			if got := w.Header().Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("header Retry-After %q; want %q", got, tc.retryAfter)
			}

			ctx, stream := handlerContext()
			gerr := deadlinekit.GRPCError(ctx, tc.err)
			if got := status.Code(gerr); got != tc.code {
				t.Errorf("gRPC code %v; want %v", got, tc.code)
			}
			checkMsg("gRPC", status.Convert(gerr).Message())
			var trailer string
			if v := stream.trailer.Get("grpc-retry-pushback-ms"); len(v) > 0 {
				trailer = strings.Join(v, ",")
			}
			if trailer != tc.pushbackMs {
				t.Errorf("trailer grpc-retry-pushback-ms %q; want %q", trailer, tc.pushbackMs)
			}
			if d, found := retryInfo(t, gerr); d != tc.info || found != (tc.info != 0) {
				t.Errorf("RetryInfo %v (found %v); want %v", d, found, tc.info)
			}
			if !errors.Is(gerr, tc.err) {
				t.Errorf("GRPCError's result does not unwrap to the error it was given")
			}
		})
	}
}

func TestErrorToWireNil(t *testing.T) {
	if got := deadlinekit.HTTPStatus(nil); got != http.StatusOK {
		t.Errorf("HTTPStatus(nil) = %d; want 200", got)
	}
	ctx, stream := handlerContext()
	if err := deadlinekit.GRPCError(ctx, nil); err != nil {
		t.Errorf("GRPCError(nil) = %v; want nil", err)
	}
	if stream.trailer.Len() != 0 {
		t.Errorf("GRPCError(nil) set a trailer: %v", stream.trailer)
	}
	w := httptest.NewRecorder()
	deadlinekit.WriteHTTPError(w, nil)
	if w.Body.Len() != 0 || len(w.Header()) != 0 || w.Result().StatusCode != http.StatusOK {
		t.Errorf("WriteHTTPError(nil) wrote %d %v %q; want nothing", w.Code, w.Header(), w.Body)
	}
	// Outside a gRPC handler the trailer cannot be set; the error still comes back.
	if got := status.Code(deadlinekit.GRPCError(context.Background(), &deadline.BudgetError{})); got != codes.DeadlineExceeded {
		t.Errorf("GRPCError outside a handler: %v; want DeadlineExceeded", got)
	}
}

// sentinels are what errors.Is is asked about in the tables below.
var sentinels = []struct {
	name string
	err  error
}{
	{"DeadlineExceeded", context.DeadlineExceeded},
	{"ErrInsufficientBudget", deadline.ErrInsufficientBudget},
	{"Canceled", context.Canceled},
	{"ErrUnavailable", deadlinekit.ErrUnavailable},
	{"ErrOverloaded", deadlinekit.ErrOverloaded},
	{"ErrInvalidArgument", deadlinekit.ErrInvalidArgument},
}

// matches lists the sentinels err matches, by name.
func matches(err error) string {
	var names []string
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			names = append(names, s.name)
		}
	}
	return strings.Join(names, " ")
}

// trackedBody is a response body that counts what is read of it and notes its close.
type trackedBody struct {
	r      io.Reader
	read   int
	closed bool
	err    error // returned after r is exhausted, instead of io.EOF
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read += n
	if err == io.EOF && b.err != nil {
		err = b.err
	}
	return n, err
}

func (b *trackedBody) Close() error { b.closed = true; return nil }

func response(code int, h http.Header, body string) (*http.Response, *trackedBody) {
	if h == nil {
		h = http.Header{}
	}
	b := &trackedBody{r: strings.NewReader(body)}
	return &http.Response{StatusCode: code, Status: strconv.Itoa(code) + " " + http.StatusText(code), Header: h, Body: b}, b
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// Back from HTTP: every row of the table, read from a response.
func TestFromHTTP(t *testing.T) {
	text := "text/plain; charset=utf-8"
	long := strings.Repeat("x", 10<<10)
	for _, tc := range []struct {
		name     string
		code     int
		h        http.Header
		body     string
		nilErr   bool
		matches  string
		grpc     codes.Code
		status   int // HTTPStatus of the error
		msg      string
		pushback time.Duration
	}{
		{name: "200", code: 200, body: "ok", nilErr: true},
		{name: "204", code: 204, nilErr: true},
		{name: "304", code: 304, nilErr: true},
		{name: "guard refusal: 504 with -1", code: 504, h: hdr("Content-Type", text, pushbackHeader, "-1"),
			body:    "shortcircuit: 3ms left, floor 20ms: request refused before the handler ran\n",
			matches: "DeadlineExceeded ErrInsufficientBudget", grpc: codes.DeadlineExceeded, status: 504,
			msg: "shortcircuit: 3ms left, floor 20ms: request refused before the handler ran", pushback: -1},
		{name: "504 alone", code: 504, body: "upstream timed out",
			matches: "DeadlineExceeded", grpc: codes.DeadlineExceeded, status: 504, msg: "upstream timed out"},
		{name: "499", code: 499, body: "client closed request",
			matches: "Canceled", grpc: codes.Canceled, status: 499, msg: "client closed request"},
		{name: "400 malformed deadline header", code: 400, h: hdr("Content-Type", text),
			body:    "propagate: malformed Grpc-Timeout header \"1x\": unknown unit 'x'\n",
			matches: "ErrInvalidArgument", grpc: codes.InvalidArgument, status: 400,
			msg: "propagate: malformed Grpc-Timeout header \"1x\": unknown unit 'x'"},
		{name: "503", code: 503, body: "down",
			matches: "ErrUnavailable", grpc: codes.Unavailable, status: 503, msg: "down"},
		{name: "503 with Retry-After: overloaded", code: 503, h: hdr("Retry-After", "2"), body: "busy",
			matches: "ErrUnavailable ErrOverloaded", grpc: codes.ResourceExhausted, status: 503, msg: "busy", pushback: 2 * time.Second},
		{name: "pushback-ms wins over Retry-After", code: 503, h: hdr("Retry-After", "2", pushbackHeader, "250"), body: "busy",
			matches: "ErrUnavailable ErrOverloaded", grpc: codes.ResourceExhausted, status: 503, msg: "busy", pushback: 250 * time.Millisecond},
		{name: "503 with -1: already retried", code: 503, h: hdr(pushbackHeader, "-1"), body: "gave up",
			matches: "ErrUnavailable", grpc: codes.Unavailable, status: 503, msg: "gave up", pushback: -1},
		{name: "429", code: 429, body: "slow down",
			matches: "ErrOverloaded", grpc: codes.ResourceExhausted, status: 429, msg: "slow down"},
		{name: "502", code: 502, body: "bad gateway",
			matches: "ErrUnavailable", grpc: codes.Unavailable, status: 502, msg: "bad gateway"},
		{name: "404", code: 404, body: "no such cart", grpc: codes.NotFound, status: 404, msg: "no such cart"},
		{name: "401", code: 401, grpc: codes.Unauthenticated, status: 401, msg: "deadlinekit: Unauthenticated (HTTP 401)"},
		{name: "418", code: 418, grpc: codes.FailedPrecondition, status: 418, msg: "deadlinekit: FailedPrecondition (HTTP 418)"},
		{name: "500", code: 500, body: "oops", grpc: codes.Unknown, status: 500, msg: "oops"},
		{name: "JSON body is a message", code: 500, h: hdr("Content-Type", "application/json"), body: `{"error":"oops"}`,
			grpc: codes.Unknown, status: 500, msg: `{"error":"oops"}`},
		{name: "HTML body is not", code: 502, h: hdr("Content-Type", "text/html"), body: "<html>Bad Gateway</html>",
			matches: "ErrUnavailable", grpc: codes.Unavailable, status: 502, msg: "deadlinekit: Unavailable (HTTP 502)"},
		{name: "long body cut to 1 KiB", code: 500, body: long, grpc: codes.Unknown, status: 500, msg: long[:1024]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := response(tc.code, tc.h, tc.body)
			err := deadlinekit.FromHTTP(resp, nil)
			if tc.nilErr {
				if err != nil {
					t.Fatalf("FromHTTP = %v; want nil", err)
				}
				if body.closed || body.read != 0 {
					t.Errorf("a success's body was read (%d bytes) or closed (%v): it is the caller's", body.read, body.closed)
				}
				return
			}
			if err == nil {
				t.Fatal("FromHTTP = nil; want an error")
			}
			if !body.closed {
				t.Error("a failure's body was not closed")
			}
			if body.read > 4<<10 {
				t.Errorf("read %d bytes of the body; want at most 4 KiB", body.read)
			}
			checkWire(t, err, tc.matches, tc.grpc, tc.status, tc.msg, tc.pushback)
		})
	}

	t.Run("transport error unchanged", func(t *testing.T) {
		cause := &url.Error{Op: "Get", URL: "http://c", Err: syscall.ECONNREFUSED}
		if err := deadlinekit.FromHTTP(nil, cause); err != cause {
			t.Errorf("FromHTTP(nil, err) = %v; want err itself", err)
		}
	})
	t.Run("no response, no error", func(t *testing.T) {
		if err := deadlinekit.FromHTTP(nil, nil); err == nil || !strings.HasPrefix(err.Error(), "deadlinekit: ") {
			t.Errorf("FromHTTP(nil, nil) = %v; want a deadlinekit error", err)
		}
	})
}

// Back from gRPC: every row of the table, read from a status and its trailer.
func TestFromGRPC(t *testing.T) {
	refused := "shortcircuit: 3ms left, floor 20ms: request refused before the handler ran"
	withInfo, _ := status.New(codes.ResourceExhausted, "busy").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(2 * time.Second)})
	badInfo, _ := status.New(codes.ResourceExhausted, "busy").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(-time.Second)})
	for _, tc := range []struct {
		name     string
		err      error
		trailer  metadata.MD
		matches  string
		grpc     codes.Code
		status   int
		msg      string
		pushback time.Duration
	}{
		{name: "guard refusal: DeadlineExceeded with -1", err: status.Error(codes.DeadlineExceeded, refused), trailer: metadata.Pairs("grpc-retry-pushback-ms", "-1"),
			matches: "DeadlineExceeded ErrInsufficientBudget", grpc: codes.DeadlineExceeded, status: 504, msg: refused, pushback: -1},
		{name: "DeadlineExceeded alone", err: status.Error(codes.DeadlineExceeded, "context deadline exceeded"),
			matches: "DeadlineExceeded", grpc: codes.DeadlineExceeded, status: 504, msg: "context deadline exceeded"},
		{name: "Canceled", err: status.Error(codes.Canceled, "context canceled"),
			matches: "Canceled", grpc: codes.Canceled, status: 499, msg: "context canceled"},
		{name: "InvalidArgument", err: status.Error(codes.InvalidArgument, "propagate: malformed X-Envoy-Expected-Rq-Timeout-Ms header"),
			matches: "ErrInvalidArgument", grpc: codes.InvalidArgument, status: 400, msg: "propagate: malformed X-Envoy-Expected-Rq-Timeout-Ms header"},
		{name: "ResourceExhausted with RetryInfo", err: withInfo.Err(),
			matches: "ErrUnavailable ErrOverloaded", grpc: codes.ResourceExhausted, status: 503, msg: "busy", pushback: 2 * time.Second},
		{name: "ResourceExhausted with the trailer", err: status.Error(codes.ResourceExhausted, "busy"), trailer: metadata.Pairs("grpc-retry-pushback-ms", "1500"),
			matches: "ErrUnavailable ErrOverloaded", grpc: codes.ResourceExhausted, status: 503, msg: "busy", pushback: 1500 * time.Millisecond},
		{name: "ResourceExhausted, a quota", err: status.Error(codes.ResourceExhausted, "quota"),
			matches: "ErrOverloaded", grpc: codes.ResourceExhausted, status: 429, msg: "quota"},
		// A hop below retried the overload and gave up: "do not retry" in the trailer,
		// and the overloaded server's "come back in" in RetryInfo. Still an overload.
		{name: "ResourceExhausted with RetryInfo beside a do not retry", err: withInfo.Err(), trailer: metadata.Pairs("grpc-retry-pushback-ms", "-1"),
			matches: "ErrUnavailable ErrOverloaded", grpc: codes.ResourceExhausted, status: 503, msg: "busy", pushback: -1},
		{name: "negative RetryInfo: do not retry", err: badInfo.Err(),
			matches: "ErrOverloaded", grpc: codes.ResourceExhausted, status: 429, msg: "busy", pushback: -1},
		{name: "Unavailable", err: status.Error(codes.Unavailable, "down"),
			matches: "ErrUnavailable", grpc: codes.Unavailable, status: 503, msg: "down"},
		{name: "Unavailable until the next probe", err: status.Error(codes.Unavailable, "open"), trailer: metadata.Pairs("grpc-retry-pushback-ms", "3000"),
			matches: "ErrUnavailable", grpc: codes.Unavailable, status: 503, msg: "open", pushback: 3 * time.Second},
		{name: "malformed trailer: do not retry", err: status.Error(codes.Unavailable, "down"), trailer: metadata.Pairs("grpc-retry-pushback-ms", "soon"),
			matches: "ErrUnavailable", grpc: codes.Unavailable, status: 503, msg: "down", pushback: -1},
		{name: "NotFound", err: status.Error(codes.NotFound, "no such cart"), grpc: codes.NotFound, status: 404, msg: "no such cart"},
		{name: "Internal", err: status.Error(codes.Internal, "bug"), grpc: codes.Internal, status: 500, msg: "bug"},
		{name: "empty message", err: status.Error(codes.Aborted, ""), grpc: codes.Aborted, status: 409, msg: "deadlinekit: Aborted (HTTP 409)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := tc.trailer
			err := deadlinekit.FromGRPC(tc.err, &tr)
			checkWire(t, err, tc.matches, tc.grpc, tc.status, tc.msg, tc.pushback)
			if !errors.Is(err, tc.err) {
				t.Error("the WireError does not unwrap to the call's error")
			}
		})
	}

	t.Run("nil", func(t *testing.T) {
		if err := deadlinekit.FromGRPC(nil, nil); err != nil {
			t.Errorf("FromGRPC(nil) = %v", err)
		}
	})
	t.Run("no trailer captured", func(t *testing.T) {
		err := deadlinekit.FromGRPC(status.Error(codes.DeadlineExceeded, "refused"), nil)
		if got := matches(err); got != "DeadlineExceeded" {
			t.Errorf("matches [%s]; want [DeadlineExceeded]: without the trailer, no refusal is known", got)
		}
	})
	t.Run("not a status: unchanged", func(t *testing.T) {
		cause := errors.New("interceptor said no")
		if err := deadlinekit.FromGRPC(cause, nil); err != cause {
			t.Errorf("FromGRPC = %v; want the error itself", err)
		}
	})
	t.Run("a local refusal keeps its type", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		local := propagate.UnaryClientInterceptor(propagate.WithFloor(time.Hour))(ctx, "/x.Y/Z", nil, nil, nil,
			func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil })
		err := deadlinekit.FromGRPC(local, nil)
		var be *deadline.BudgetError
		if !errors.As(err, &be) || be.Needed != time.Hour {
			t.Errorf("FromGRPC(local refusal) = %v; want it to unwrap to the *deadline.BudgetError", err)
		}
		if !errors.Is(err, deadline.ErrInsufficientBudget) {
			t.Errorf("FromGRPC(local refusal) does not match ErrInsufficientBudget")
		}
	})
}

// relayHTTPToGRPC is B relaying an HTTP downstream's answer: what a gRPC client of B
// receives (the error after grpc-go's encoding, and the trailer).
func relayHTTPToGRPC(t *testing.T, resp *http.Response) (metadata.MD, error) {
	t.Helper()
	ctx, stream := handlerContext()
	err := deadlinekit.GRPCError(ctx, deadlinekit.FromHTTP(resp, nil))
	return stream.trailer, overTheWire(t, err)
}

// relayGRPCToHTTP is A relaying a gRPC downstream's answer: the response A's client
// receives.
func relayGRPCToHTTP(err error, tr metadata.MD) *http.Response {
	w := httptest.NewRecorder()
	deadlinekit.WriteHTTPError(w, deadlinekit.FromGRPC(err, &tr))
	return w.Result()
}

func bodyOf(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// HTTP → gRPC → HTTP keeps the status, the message and the pushback, "do not retry"
// included. 429 with Retry-After is the one exception, by DESIGN: "overloaded, come
// back" is ResourceExhausted with a pushback on gRPC and 503 with Retry-After on HTTP.
func TestRoundTripHTTPGRPCHTTP(t *testing.T) {
	// A real guard refusal, as shortcircuit writes it.
	refusal := func() *http.Response {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
		shortcircuit.NewMiddleware(shortcircuit.WithFloor(time.Hour))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			t.Error("the guard let the request through")
		})).ServeHTTP(w, r)
		return w.Result()
	}
	answer := func(code int, h http.Header, msg string) func() *http.Response {
		return func() *http.Response {
			w := httptest.NewRecorder()
			for k, v := range h {
				w.Header()[k] = v
			}
			http.Error(w, msg, code)
			return w.Result()
		}
	}
	for _, tc := range []struct {
		name       string
		in         func() *http.Response
		wantStatus int // 0: the same as in
		grpc       codes.Code
	}{
		{name: "shortcircuit's refusal", in: refusal, grpc: codes.DeadlineExceeded},
		{name: "504 with -1", in: answer(504, hdr(pushbackHeader, "-1"), "shortcircuit: 3ms left, floor 20ms: refused"), grpc: codes.DeadlineExceeded},
		{name: "504", in: answer(504, nil, "timed out"), grpc: codes.DeadlineExceeded},
		{name: "499", in: answer(499, nil, "client went away"), grpc: codes.Canceled},
		{name: "400", in: answer(400, nil, `propagate: malformed Grpc-Timeout header "1x": unknown unit`), grpc: codes.InvalidArgument},
		{name: "503 with Retry-After", in: answer(503, hdr("Retry-After", "2"), "busy"), grpc: codes.ResourceExhausted},
		{name: "503 with pushback-ms", in: answer(503, hdr(pushbackHeader, "1500"), "busy"), grpc: codes.ResourceExhausted},
		{name: "503", in: answer(503, nil, "down"), grpc: codes.Unavailable},
		{name: "503 with -1", in: answer(503, hdr(pushbackHeader, "-1"), "gave up"), grpc: codes.Unavailable},
		{name: "429", in: answer(429, nil, "slow down"), grpc: codes.ResourceExhausted},
		{name: "429 with Retry-After", in: answer(429, hdr("Retry-After", "2"), "slow down"), wantStatus: 503, grpc: codes.ResourceExhausted},
		{name: "404", in: answer(404, nil, "no such cart"), grpc: codes.NotFound},
		{name: "401", in: answer(401, nil, "who are you"), grpc: codes.Unauthenticated},
		{name: "403", in: answer(403, nil, "not you"), grpc: codes.PermissionDenied},
		{name: "500", in: answer(500, nil, "oops"), grpc: codes.Unknown},
		{name: "501", in: answer(501, nil, "not here"), grpc: codes.Unimplemented},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := tc.in()
			want := struct {
				status              int
				body                string
				pushback, retryAftr string
			}{first.StatusCode, bodyOf(t, first), first.Header.Get(pushbackHeader), first.Header.Get("Retry-After")}
			if tc.wantStatus != 0 {
				want.status = tc.wantStatus
			}
			first.Body = io.NopCloser(strings.NewReader(want.body))

			tr, gerr := relayHTTPToGRPC(t, first)
			if got := status.Code(gerr); got != tc.grpc {
				t.Errorf("gRPC code %v; want %v", got, tc.grpc)
			}
			if got, wantMsg := status.Convert(gerr).Message(), strings.TrimSpace(want.body); got != wantMsg {
				t.Errorf("gRPC message %q; want %q", got, wantMsg)
			}
			if want.pushback == "-1" {
				if got := tr.Get("grpc-retry-pushback-ms"); len(got) != 1 || got[0] != "-1" {
					t.Errorf("trailer grpc-retry-pushback-ms %q; want -1", got)
				}
			}

			last := relayGRPCToHTTP(gerr, tr)
			if last.StatusCode != want.status {
				t.Errorf("status %d after the round trip; want %d", last.StatusCode, want.status)
			}
			if got := bodyOf(t, last); got != want.body {
				t.Errorf("body %q after the round trip; want %q", got, want.body)
			}
			if got := last.Header.Get(pushbackHeader); want.pushback == "-1" && got != "-1" {
				t.Errorf("grpc-retry-pushback-ms %q after the round trip; want -1", got)
			}
			if got := last.Header.Get("Retry-After"); got != want.retryAftr && !(want.retryAftr == "" && want.pushback != "" && want.pushback != "-1") {
				t.Errorf("Retry-After %q after the round trip; want %q", got, want.retryAftr)
			}
			if want.pushback != "" && want.pushback != "-1" {
				if got := last.Header.Get(pushbackHeader); got != want.pushback {
					t.Errorf("grpc-retry-pushback-ms %q after the round trip; want %q", got, want.pushback)
				}
			}
		})
	}
}

// gRPC → HTTP → gRPC keeps the code, the message and the pushback for the table's
// codes.
func TestRoundTripGRPCHTTPGRPC(t *testing.T) {
	withInfo, _ := status.New(codes.ResourceExhausted, "busy").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(2 * time.Second)})
	for _, tc := range []struct {
		name    string
		err     error
		trailer metadata.MD
	}{
		{"DeadlineExceeded with -1", status.Error(codes.DeadlineExceeded, "shortcircuit: 3ms left, floor 20ms: refused"), metadata.Pairs("grpc-retry-pushback-ms", "-1")},
		{"DeadlineExceeded", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), nil},
		{"Canceled", status.Error(codes.Canceled, "context canceled"), nil},
		{"InvalidArgument", status.Error(codes.InvalidArgument, "malformed"), nil},
		{"ResourceExhausted with a pushback", withInfo.Err(), nil},
		{"ResourceExhausted", status.Error(codes.ResourceExhausted, "quota"), nil},
		{"Unavailable", status.Error(codes.Unavailable, "down"), nil},
		{"Unavailable with -1", status.Error(codes.Unavailable, "gave up"), metadata.Pairs("grpc-retry-pushback-ms", "-1")},
		{"NotFound", status.Error(codes.NotFound, "no such cart"), nil},
		{"PermissionDenied", status.Error(codes.PermissionDenied, "not you"), nil},
		{"Unimplemented", status.Error(codes.Unimplemented, "not here"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mid := relayGRPCToHTTP(tc.err, tc.trailer)
			tr, gerr := relayHTTPToGRPC(t, mid)
			if got, want := status.Code(gerr), status.Code(tc.err); got != want {
				t.Errorf("code %v after the round trip; want %v", got, want)
			}
			if got, want := status.Convert(gerr).Message(), status.Convert(tc.err).Message(); got != want {
				t.Errorf("message %q after the round trip; want %q", got, want)
			}
			if got, want := tr.Get("grpc-retry-pushback-ms"), tc.trailer.Get("grpc-retry-pushback-ms"); strings.Join(got, ",") != strings.Join(want, ",") && len(want) > 0 {
				t.Errorf("trailer %q after the round trip; want %q", got, want)
			}
			wantInfo, _ := retryInfo(t, tc.err)
			if got, _ := retryInfo(t, gerr); got != wantInfo {
				t.Errorf("RetryInfo %v after the round trip; want %v", got, wantInfo)
			}
		})
	}
}

// hopMethod is the one method of hopService: google.protobuf.Empty both ways.
const hopMethod = "/stacktest.Hop/Work"

// hopService is a gRPC service of one method, hopMethod, registered by hand, whose
// handler is h.
func hopService(h func(ctx context.Context) error) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "stacktest.Hop",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Work",
			Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
				in := new(emptypb.Empty)
				if err := dec(in); err != nil {
					return nil, err
				}
				call := func(ctx context.Context, _ any) (any, error) { return new(emptypb.Empty), h(ctx) }
				if icpt == nil {
					return call(ctx, in)
				}
				return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: hopMethod}, call)
			},
		}},
	}
}

// serveRelay starts a gRPC server for h and returns a client connection to it.
func serveRelay(t *testing.T, h func(ctx context.Context) error, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	gs.RegisterService(hopService(h), nil)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func httpClient(t *testing.T) *http.Client {
	t.Helper()
	base := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(base.CloseIdleConnections)
	return &http.Client{Transport: propagate.NewTransport(base)}
}

func checkLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// A gRPC client calls B, whose handler calls C over HTTP; C's guard refuses (floor
// above the time left), and B relays with one line each way. The client sees
// DeadlineExceeded with C's words (the floor) and, since C says "do not retry", the
// trailer grpc-retry-pushback-ms: -1.
func TestLoopbackGRPCRelaysHTTPRefusal(t *testing.T) {
	checkLeaks(t)
	var cHits atomic.Int32
	var cPushback atomic.Value
	guard := propagate.NewMiddleware()(shortcircuit.NewMiddleware(shortcircuit.WithFloor(time.Hour))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("C's handler ran")
	})))
	c := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cHits.Add(1)
		guard.ServeHTTP(w, r)
		cPushback.Store(w.Header().Get(pushbackHeader))
	}))
	t.Cleanup(c.Close)
	client := httpClient(t)

	conn := serveRelay(t, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err := deadlinekit.FromHTTP(resp, err); err != nil {
			return deadlinekit.GRPCError(ctx, err) // the relay: one line
		}
		return resp.Body.Close()
	}, grpc.ChainUnaryInterceptor(propagate.UnaryServerInterceptor()))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var tr metadata.MD
	err := conn.Invoke(ctx, hopMethod, new(emptypb.Empty), new(emptypb.Empty), grpc.Trailer(&tr))
	if got := status.Code(err); got != codes.DeadlineExceeded {
		t.Fatalf("code %v (%v); want DeadlineExceeded", got, err)
	}
	msg := status.Convert(err).Message()
	if !strings.HasPrefix(msg, "shortcircuit: ") || !strings.Contains(msg, "floor 1h0m0s") || !strings.Contains(msg, "left") {
		t.Errorf("message %q; want C's refusal, with the floor and the time left", msg)
	}
	if n := cHits.Load(); n != 1 {
		t.Errorf("C saw %d requests; want 1", n)
	}
	sent, _ := cPushback.Load().(string)
	got := strings.Join(tr.Get("grpc-retry-pushback-ms"), ",")
	if sent == "-1" {
		if got != "-1" {
			t.Errorf("trailer grpc-retry-pushback-ms %q; want -1, as C sent", got)
		}
		if !errors.Is(deadlinekit.FromGRPC(err, &tr), deadline.ErrInsufficientBudget) {
			t.Error("the client's FromGRPC does not match deadline.ErrInsufficientBudget")
		}
	} else {
		t.Logf("C's guard does not send grpc-retry-pushback-ms: -1 (got %q): the trailer (%q) is not checked", sent, got)
	}
}

// The reverse: an HTTP client calls A, whose handler calls B over gRPC; B's guard
// refuses and A relays with one line. The client sees 504 with B's words and
// grpc-retry-pushback-ms: -1.
func TestLoopbackHTTPRelaysGRPCRefusal(t *testing.T) {
	checkLeaks(t)
	conn := serveRelay(t, func(ctx context.Context) error {
		t.Error("B's handler ran")
		return nil
	}, grpc.ChainUnaryInterceptor(propagate.UnaryServerInterceptor(), shortcircuit.UnaryServerInterceptor(shortcircuit.WithFloor(time.Hour))))

	var bTrailer atomic.Value
	a := httptest.NewServer(propagate.NewMiddleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tr metadata.MD
		deadlinekit.WriteHTTPError(w, deadlinekit.FromGRPC(conn.Invoke(r.Context(), hopMethod, new(emptypb.Empty), new(emptypb.Empty), grpc.Trailer(&tr)), &tr))
		bTrailer.Store(strings.Join(tr.Get("grpc-retry-pushback-ms"), ","))
	})))
	t.Cleanup(a.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL, nil)
	resp, err := httpClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	pushback := resp.Header.Get(pushbackHeader)
	body := bodyOf(t, resp)
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("status %d (%s); want 504", resp.StatusCode, body)
	}
	if !strings.HasPrefix(body, "shortcircuit: ") || !strings.Contains(body, "floor 1h0m0s") {
		t.Errorf("body %q; want B's refusal, with the floor", body)
	}
	if sent, _ := bTrailer.Load().(string); sent == "-1" {
		if pushback != "-1" {
			t.Errorf("header grpc-retry-pushback-ms %q; want -1, as B sent", pushback)
		}
		resp.Body = io.NopCloser(strings.NewReader(body))
		if err := deadlinekit.FromHTTP(resp, nil); !errors.Is(err, deadline.ErrInsufficientBudget) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the client's FromHTTP = %v; want it to match ErrInsufficientBudget and DeadlineExceeded", err)
		}
	} else {
		t.Logf("B's guard does not send the trailer grpc-retry-pushback-ms: -1 (got %q): the header (%q) is not checked", sent, pushback)
	}
}

// Hostile pushback values and bodies: FromHTTP reads them as package retry does, and
// what the relay writes back is well-formed.
func TestFromHTTPHostile(t *testing.T) {
	huge := strings.Repeat("9", 10000)
	for _, tc := range []struct {
		name     string
		code     int
		h        http.Header
		body     *trackedBody
		pushback string // "wait", "no-retry", "none"
	}{
		{name: "Retry-After huge", code: 503, h: hdr("Retry-After", huge), pushback: "wait"},
		{name: "Retry-After past int64", code: 503, h: hdr("Retry-After", "99999999999999999999999"), pushback: "wait"},
		{name: "Retry-After negative", code: 503, h: hdr("Retry-After", "-5"), pushback: "no-retry"},
		{name: "Retry-After fractional", code: 503, h: hdr("Retry-After", "1.5"), pushback: "no-retry"},
		{name: "Retry-After empty", code: 503, h: hdr("Retry-After", ""), pushback: "no-retry"},
		{name: "Retry-After date past", code: 503, h: hdr("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT"), pushback: "none"},
		{name: "Retry-After date far", code: 503, h: hdr("Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT"), pushback: "wait"},
		{name: "Retry-After NUL", code: 503, h: hdr("Retry-After", "\x00"), pushback: "no-retry"},
		{name: "Retry-After list", code: 503, h: hdr("Retry-After", "2, 3"), pushback: "no-retry"},
		{name: "Retry-After repeated", code: 503, h: hdr("Retry-After", "2", "Retry-After", "-1"), pushback: "wait"},
		{name: "pushback -1", code: 503, h: hdr(pushbackHeader, "-1"), pushback: "no-retry"},
		{name: "pushback very negative", code: 504, h: hdr(pushbackHeader, "-"+huge), pushback: "no-retry"},
		{name: "pushback plus sign", code: 503, h: hdr(pushbackHeader, "+5"), pushback: "no-retry"},
		{name: "pushback hex", code: 503, h: hdr(pushbackHeader, "0x10"), pushback: "no-retry"},
		{name: "pushback exponent", code: 503, h: hdr(pushbackHeader, "1e3"), pushback: "no-retry"},
		{name: "pushback spaces", code: 503, h: hdr(pushbackHeader, " 7 "), pushback: "wait"},
		{name: "pushback huge", code: 503, h: hdr(pushbackHeader, huge), pushback: "wait"},
		{name: "pushback zero", code: 503, h: hdr(pushbackHeader, "0"), pushback: "none"},
		{name: "pushback invalid UTF-8", code: 503, h: hdr(pushbackHeader, "\xff\xfe"), pushback: "no-retry"},
		{name: "pushback on a 499", code: 499, h: hdr(pushbackHeader, "1"), pushback: "wait"},
		{name: "Retry-After on a 504", code: 504, h: hdr("Retry-After", "3"), pushback: "wait"},
		{name: "status 0", code: 0, pushback: "none"},
		{name: "status 99", code: 99, pushback: "none"},
		{name: "status 600", code: 600, pushback: "none"},
		{name: "status 999", code: 999, h: hdr(pushbackHeader, "-1"), pushback: "no-retry"},
		{name: "status negative", code: -1, pushback: "none"},
		{name: "body invalid UTF-8", code: 500, body: &trackedBody{r: strings.NewReader("bad \xff\xfe bytes")}, pushback: "none"},
		{name: "body fails midway", code: 500, body: &trackedBody{r: strings.NewReader("partial"), err: errors.New("reset")}, pushback: "none"},
		{name: "body of 1 MiB", code: 500, body: &trackedBody{r: strings.NewReader(strings.Repeat("é", 1<<19))}, pushback: "none"},
		{name: "body of NULs", code: 500, body: &trackedBody{r: strings.NewReader(strings.Repeat("\x00", 100))}, pushback: "none"},
		{name: "Content-Type malformed", code: 500, h: hdr("Content-Type", "text/plain; charset=\x00;;"), body: &trackedBody{r: strings.NewReader("x")}, pushback: "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: tc.code, Header: tc.h}
			if resp.Header == nil {
				resp.Header = http.Header{}
			}
			if tc.body != nil {
				resp.Body = tc.body
			}
			err := deadlinekit.FromHTTP(resp, nil)
			var we *deadlinekit.WireError
			if !errors.As(err, &we) {
				t.Fatalf("FromHTTP = %v (%T); want a *WireError", err, err)
			}
			switch {
			case tc.pushback == "wait" && we.Pushback <= 0,
				tc.pushback == "no-retry" && we.Pushback >= 0,
				tc.pushback == "none" && we.Pushback != 0:
				t.Errorf("Pushback %v; want %s", we.Pushback, tc.pushback)
			}
			if tc.body != nil {
				if !tc.body.closed {
					t.Error("body not closed")
				}
				if tc.body.read > 4<<10 {
					t.Errorf("read %d bytes of the body; want at most 4 KiB", tc.body.read)
				}
			}
			checkRelay(t, err)
		})
	}
}

// checkRelay checks that a failure read by FromHTTP relays to well-formed answers.
func checkRelay(t *testing.T, err error) {
	t.Helper()
	var we *deadlinekit.WireError
	if !errors.As(err, &we) {
		return
	}
	if !utf8.ValidString(we.Message) || len(we.Message) > 1<<10 {
		t.Errorf("message of %d bytes, valid UTF-8 %v; want at most 1 KiB of UTF-8", len(we.Message), utf8.ValidString(we.Message))
	}
	s := deadlinekit.HTTPStatus(err)
	if s < 400 || s > 599 {
		t.Errorf("HTTPStatus = %d; want 4xx or 5xx", s)
	}
	w := httptest.NewRecorder()
	deadlinekit.WriteHTTPError(w, err)
	if w.Code != s {
		t.Errorf("wrote %d; HTTPStatus says %d", w.Code, s)
	}
	if v := w.Header().Get(pushbackHeader); v != "" && v != "-1" {
		if _, perr := strconv.ParseUint(v, 10, 63); perr != nil {
			t.Errorf("wrote grpc-retry-pushback-ms %q: %v", v, perr)
		}
	}
	if v := w.Header().Get("Retry-After"); v != "" {
		if _, perr := strconv.ParseUint(v, 10, 63); perr != nil {
			t.Errorf("wrote Retry-After %q: %v", v, perr)
		}
	}
	// What was written reads back the same.
	back := deadlinekit.FromHTTP(w.Result(), nil)
	var we2 *deadlinekit.WireError
	if !errors.As(back, &we2) {
		t.Fatalf("the relayed answer reads back as %v", back)
	}
	if (we2.Pushback < 0) != (we.Pushback < 0) || (we2.Pushback > 0) != (we.Pushback > 0) {
		t.Errorf("pushback %v reads back as %v", we.Pushback, we2.Pushback)
	}
	if we2.Error() != err.Error() && len(err.Error()) < 1<<10 {
		t.Errorf("message %q reads back as %q", err.Error(), we2.Error())
	}
	ctx, stream := handlerContext()
	gerr := deadlinekit.GRPCError(ctx, err)
	if status.Code(gerr) == codes.OK {
		t.Error("GRPCError gave OK")
	}
	if v := stream.trailer.Get("grpc-retry-pushback-ms"); len(v) > 1 {
		t.Errorf("trailer set %d times", len(v))
	}
}

// FromHTTP reads hostile status lines, headers and bodies without panicking, and what
// it returns relays to well-formed answers.
func FuzzFromHTTP(f *testing.F) {
	f.Add(504, "", "-1", "text/plain", "shortcircuit: 3ms left, floor 20ms: request refused before the handler ran\n")
	f.Add(503, "2", "", "", "busy")
	f.Add(503, "Fri, 31 Dec 9999 23:59:59 GMT", "", "", "")
	f.Add(429, "99999999999999999999999", "1e3", "application/json", `{"e":1}`)
	f.Add(999, "\x00", "-99999999999999999999999", "text/plain; charset=\x00", "\xff\xfe")
	f.Add(0, "-5", "+5", "text/html", "<html>")
	f.Add(200, "", "", "", "ok")
	f.Add(499, "0", "1", "0", "0") // a pushback on a cancel survives the relay
	f.Fuzz(func(t *testing.T, code int, retryAfter, pushback, ctype, body string) {
		h := http.Header{}
		if retryAfter != "" {
			h.Set("Retry-After", retryAfter)
		}
		if pushback != "" {
			h.Set(pushbackHeader, pushback)
		}
		if ctype != "" {
			h.Set("Content-Type", ctype)
		}
		b := &trackedBody{r: strings.NewReader(body)}
		err := deadlinekit.FromHTTP(&http.Response{StatusCode: code, Header: h, Body: b}, nil)
		if code >= 100 && code < 400 {
			if err != nil || b.closed {
				t.Fatalf("success %d: err %v, body closed %v", code, err, b.closed)
			}
			return
		}
		if err == nil {
			t.Fatalf("status %d: nil error", code)
		}
		if !b.closed {
			t.Error("body not closed")
		}
		checkRelay(t, err)
	})
}

// checkWire checks what an error read back from the wire (FromHTTP, FromGRPC) says:
// the sentinels it matches, its gRPC code and HTTP status, its message, and, as a
// *WireError, its pushback.
func checkWire(t *testing.T, err error, wantMatches string, code codes.Code, httpStatus int, msg string, pushback time.Duration) {
	t.Helper()
	if got := matches(err); got != wantMatches {
		t.Errorf("errors.Is matches [%s]; want [%s]", got, wantMatches)
	}
	if got := status.Code(err); got != code {
		t.Errorf("status.Code = %v; want %v", got, code)
	}
	if got := deadlinekit.HTTPStatus(err); got != httpStatus {
		t.Errorf("HTTPStatus = %d; want %d", got, httpStatus)
	}
	if err.Error() != msg {
		t.Errorf("message %q; want %q", err.Error(), msg)
	}
	var we *deadlinekit.WireError
	if !errors.As(err, &we) {
		t.Fatalf("%T is not a *WireError", err)
	}
	if we.Pushback != pushback {
		t.Errorf("Pushback %v; want %v", we.Pushback, pushback)
	}
}
