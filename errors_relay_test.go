package deadlinekit_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/retry"
)

const relayedHeader = "Deadlinekit-Relayed"

// signals is what one hop answered: the HTTP status (or the gRPC code's), the gRPC
// code, grpc-retry-pushback-ms and deadlinekit-relayed.
type signals struct {
	status   int
	code     codes.Code
	pushback string
	relayed  string
}

func httpSignals(resp *http.Response) signals {
	return signals{status: resp.StatusCode, pushback: resp.Header.Get(pushbackHeader), relayed: resp.Header.Get(relayedHeader)}
}

func grpcSignals(err error, tr metadata.MD) signals {
	return signals{code: status.Code(err), pushback: strings.Join(tr.Get("grpc-retry-pushback-ms"), ","),
		relayed: strings.Join(tr.Get("deadlinekit-relayed"), ",")}
}

// bFailure is how B fails: its own work times out, or is cancelled (both by B's own
// doing, answered with the root package's helpers: a local failure), or B's guard
// refuses the request for lack of budget.
type bFailure string

const (
	bTimesOut  bFailure = "B's work times out"
	bCancelled bFailure = "B's work is cancelled"
	bRefuses   bFailure = "B's guard refuses"
)

// localFailure is B's handler's failure: its own work under a limit of its own.
func localFailure(ctx context.Context, f bFailure) error {
	switch f {
	case bTimesOut:
		ctx, cancel := context.WithTimeout(ctx, time.Millisecond)
		defer cancel()
		<-ctx.Done()
		return ctx.Err()
	case bCancelled:
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		return ctx.Err()
	}
	return fmt.Errorf("B's handler ran (%s)", f)
}

// bOptions are B's stack options: a floor above any budget when B's guard refuses.
func bOptions(f bFailure) []deadlinekit.Option {
	if f == bRefuses {
		return []deadlinekit.Option{deadlinekit.WithFloor(time.Hour)}
	}
	return nil
}

// startB starts B, failing as f says, over HTTP or gRPC, and returns A's relay
// to it: B's own answer's signals as A saw them, and the call's error, read with the
// root package's one-liners.
func startB(t *testing.T, grpcB bool, f bFailure) func(ctx context.Context) (signals, error) {
	t.Helper()
	if !grpcB {
		b := httptest.NewServer(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			deadlinekit.WriteHTTPError(w, localFailure(r.Context(), f))
		}), bOptions(f)...))
		t.Cleanup(b.Close)
		toB := &http.Client{Transport: deadlinekit.NewTransport(nil)}
		t.Cleanup(toB.CloseIdleConnections)
		return func(ctx context.Context) (signals, error) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.URL, strings.NewReader("order"))
			resp, err := toB.Do(req)
			var seen signals
			if err == nil {
				seen = httpSignals(resp)
			}
			return seen, deadlinekit.FromHTTP(resp, err)
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(deadlinekit.ServerOptions(bOptions(f)...)...)
	gs.RegisterService(hopService(func(ctx context.Context) error {
		return deadlinekit.GRPCError(ctx, localFailure(ctx, f))
	}), nil)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), append(deadlinekit.DialOptions(),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return func(ctx context.Context) (signals, error) {
		var tr metadata.MD
		err := conn.Invoke(ctx, hopMethod, new(emptypb.Empty), new(emptypb.Empty), grpc.Trailer(&tr))
		return grpcSignals(err, tr), deadlinekit.FromGRPC(err, &tr)
	}
}

// callA starts A over HTTP or gRPC, relaying B with relay, calls it as a user with a
// minute's budget, and returns A's answer's signals and B's as A saw them.
func callA(t *testing.T, grpcA bool, relay func(ctx context.Context) (signals, error)) (a, b signals) {
	t.Helper()
	var mu sync.Mutex
	saw := func(s signals) {
		mu.Lock()
		b = s
		mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !grpcA {
		srv := httptest.NewServer(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s, err := relay(r.Context())
			saw(s)
			deadlinekit.WriteHTTPError(w, err)
		})))
		t.Cleanup(srv.Close)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("order"))
		resp, err := httpClient(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		a = httpSignals(resp)
	} else {
		conn := serveRelay(t, func(ctx context.Context) error {
			s, err := relay(ctx)
			saw(s)
			return deadlinekit.GRPCError(ctx, err)
		}, deadlinekit.ServerOptions()...)
		var tr metadata.MD
		err := conn.Invoke(ctx, hopMethod, new(emptypb.Empty), new(emptypb.Empty), grpc.Trailer(&tr))
		a = grpcSignals(err, tr)
	}
	mu.Lock()
	defer mu.Unlock()
	return a, b
}

// user → A → B on loopback, every protocol pair, where B times out in its own work,
// or is cancelled in it, or B's guard refuses: B answers 504 / DEADLINE_EXCEEDED or
// 499 / CANCELED of its own, without deadlinekit-relayed; A relays it with the
// one-liners and answers the same status and pushback, with deadlinekit-relayed: 1,
// so that the user's breaker does not count B's failure against A.
func TestLoopbackRelayedTimeoutIsMarked(t *testing.T) {
	checkLeaks(t)
	want := map[bFailure]signals{
		bTimesOut:  {status: http.StatusGatewayTimeout, code: codes.DeadlineExceeded},
		bCancelled: {status: deadlinekit.StatusClientClosedRequest, code: codes.Canceled},
		bRefuses:   {status: http.StatusGatewayTimeout, code: codes.DeadlineExceeded, pushback: "-1"},
	}
	proto := map[bool]string{false: "HTTP", true: "gRPC"}
	for _, f := range []bFailure{bTimesOut, bCancelled, bRefuses} {
		for _, grpcA := range []bool{false, true} {
			for _, grpcB := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/A %s/B %s", f, proto[grpcA], proto[grpcB]), func(t *testing.T) {
					a, b := callA(t, grpcA, startB(t, grpcB, f))
					w := want[f]
					// B's own answer: its failure is local, not relayed.
					if grpcB {
						if b.code != w.code || b.pushback != w.pushback || b.relayed != "" {
							t.Errorf("B answered %v, pushback %q, relayed %q; want %v, pushback %q, not relayed", b.code, b.pushback, b.relayed, w.code, w.pushback)
						}
					} else if b.status != w.status || b.pushback != w.pushback || b.relayed != "" {
						t.Errorf("B answered %d, pushback %q, relayed %q; want %d, pushback %q, not relayed", b.status, b.pushback, b.relayed, w.status, w.pushback)
					}
					// A's answer: the same, relayed.
					if grpcA {
						if a.code != w.code || a.pushback != w.pushback || a.relayed != "1" {
							t.Errorf("A answered %v, pushback %q, relayed %q; want %v, pushback %q, relayed 1", a.code, a.pushback, a.relayed, w.code, w.pushback)
						}
					} else if a.status != w.status || a.pushback != w.pushback || a.relayed != "1" {
						t.Errorf("A answered %d, pushback %q, relayed %q; want %d, pushback %q, relayed 1", a.status, a.pushback, a.relayed, w.status, w.pushback)
					}
				})
			}
		}
	}
}

// A server's own timeout or cancellation stays its own: no deadlinekit-relayed, also
// when it ended a call to a downstream (the call's error wraps the server's context
// error) or a retry layer's wait for one. Status and pushback are as before.
func TestLocalTimeoutIsNotRelayed(t *testing.T) {
	last504 := &retry.StatusError{StatusCode: http.StatusGatewayTimeout, Status: "504 Gateway Timeout", Header: http.Header{}}
	for _, tc := range []struct {
		name     string
		err      error
		status   int
		pushback string
	}{
		{"the handler's context", context.DeadlineExceeded, http.StatusGatewayTimeout, ""},
		{"the handler's context, cancelled", context.Canceled, deadlinekit.StatusClientClosedRequest, ""},
		{"an HTTP call ended by the handler's context", &url.Error{Op: "Post", URL: "http://b/", Err: context.DeadlineExceeded}, http.StatusGatewayTimeout, ""},
		{"a retry layer stopped by the handler's context", &retry.StopError{Attempts: 1, Reason: "context ended", Cause: context.DeadlineExceeded, Last: last504}, http.StatusGatewayTimeout, ""},
		{"a gRPC call ended by the handler's context, read with FromGRPC", deadlinekit.FromGRPC(fmt.Errorf("%w: %w", status.Error(codes.DeadlineExceeded, "stopped"), context.DeadlineExceeded), nil), http.StatusGatewayTimeout, ""},
		{"a gRPC call cancelled with the handler's context, read with FromGRPC", deadlinekit.FromGRPC(fmt.Errorf("%w: %w", status.Error(codes.Canceled, "stopped"), context.Canceled), nil), deadlinekit.StatusClientClosedRequest, ""},
		{"the handler's own WireError", &deadlinekit.WireError{Code: codes.DeadlineExceeded}, http.StatusGatewayTimeout, ""},
	} {
		rec := httptest.NewRecorder()
		deadlinekit.WriteHTTPError(rec, tc.err)
		if rec.Code != tc.status || rec.Header().Get(pushbackHeader) != tc.pushback || rec.Header().Get(relayedHeader) != "" {
			t.Errorf("%s: %d, pushback %q, relayed %q; want %d, pushback %q, not relayed", tc.name,
				rec.Code, rec.Header().Get(pushbackHeader), rec.Header().Get(relayedHeader), tc.status, tc.pushback)
		}
		ctx, stream := handlerContext()
		if code := status.Code(deadlinekit.GRPCError(ctx, tc.err)); code != codeOf(tc.status) || len(stream.trailer.Get("deadlinekit-relayed")) != 0 {
			t.Errorf("%s: gRPC %v, trailer %v; want %v, not relayed", tc.name, code, stream.trailer, codeOf(tc.status))
		}
	}
}

func codeOf(httpStatus int) codes.Code {
	if httpStatus == deadlinekit.StatusClientClosedRequest {
		return codes.Canceled
	}
	return codes.DeadlineExceeded
}
