package connectkit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// TestDedupHandler: connectkit.HandlerOption with deadlinekit.WithDedup runs a keyed
// procedure once and replays its answer (message, header, trailer) or its error to
// every repeat, in the Connect, gRPC and gRPC-Web protocols.
func TestDedupHandler(t *testing.T) {
	for _, proto := range []struct {
		name string
		opt  []connect.ClientOption
	}{{"connect", nil}, {"grpc", []connect.ClientOption{connect.WithGRPC()}}, {"grpcweb", []connect.ClientOption{connect.WithGRPCWeb()}}} {
		t.Run(proto.name, func(t *testing.T) {
			var n atomic.Int64
			const proc = "/pay.Payments/Charge"
			mux := http.NewServeMux()
			mux.Handle(proc, connect.NewUnaryHandler(proc,
				func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
					i := n.Add(1)
					if req.Msg.GetValue() == "decline" {
						return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("declined %d", i))
					}
					resp := connect.NewResponse(wrapperspb.String(fmt.Sprint("charge ", i)))
					resp.Header().Set("X-Charge", fmt.Sprint(i))
					resp.Trailer().Set("X-Ledger", fmt.Sprint("entry-", i))
					return resp, nil
				}, connectkit.HandlerOption(deadlinekit.WithDedup(dedup.NewMemoryStore()))))
			srv := httptest.NewUnstartedServer(mux)
			var protocols http.Protocols
			protocols.SetUnencryptedHTTP2(true)
			protocols.SetHTTP1(true)
			srv.Config.Protocols = &protocols
			srv.Start()
			defer srv.Close()
			tr := &http.Transport{Protocols: &protocols}
			defer tr.CloseIdleConnections()
			client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](&http.Client{Transport: tr}, srv.URL+proc, proto.opt...)
			call := func(key, msg string) (*connect.Response[wrapperspb.StringValue], error) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				req := connect.NewRequest(wrapperspb.String(msg))
				req.Header().Set("Idempotency-Key", key)
				return client.CallUnary(ctx, req)
			}
			for i := range 3 {
				resp, err := call("k", "100")
				if err != nil {
					t.Fatal(err)
				}
				if resp.Msg.GetValue() != "charge 1" || resp.Header().Get("X-Charge") != "1" || resp.Trailer().Get("X-Ledger") != "entry-1" {
					t.Fatalf("call %d: %q header %v trailer %v", i, resp.Msg.GetValue(), resp.Header(), resp.Trailer())
				}
				if replayed := resp.Header().Get("Idempotent-Replayed") == "true"; replayed != (i > 0) {
					t.Fatalf("call %d: replayed %v", i, replayed)
				}
			}
			_, err1 := call("d", "decline")
			_, err2 := call("d", "decline")
			var ce1, ce2 *connect.Error
			if !errors.As(err1, &ce1) || !errors.As(err2, &ce2) || ce1.Code() != connect.CodeFailedPrecondition ||
				ce2.Code() != connect.CodeFailedPrecondition || ce2.Message() != ce1.Message() || ce2.Meta().Get("Idempotent-Replayed") != "true" {
				t.Fatalf("declines: %v, %v (meta %v)", err1, err2, metaOf(err2))
			}
			if _, err := call("k", "other"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Fatalf("another message under the key: %v", err)
			}
			if n.Load() != 2 {
				t.Fatalf("handler ran %d times, want 2", n.Load())
			}
		})
	}
}

// dedupServe serves handler h under the whole server stack with dedup on a fresh
// memory store (options opts), and returns a call function for procPost that sends
// the Idempotency-Key key, under a deadline of timeout, in protocol proto.
func dedupServe(t *testing.T, proto connect.ClientOption, h handlerFunc, opts ...dedup.Option) func(key string, timeout time.Duration) (*connect.Response[msg], error) {
	t.Helper()
	url, hc := serve(t, h, connectkit.HandlerOption(deadlinekit.WithDedup(dedup.NewMemoryStore(), opts...)))
	c := client(hc, url, procPost, proto)
	return func(key string, timeout time.Duration) (*connect.Response[msg], error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req := connect.NewRequest(wrapperspb.String("100"))
		req.Header().Set("Idempotency-Key", key)
		return c.CallUnary(ctx, req)
	}
}

// TestDedupUnmarshallableAnswer: a response connect-go cannot marshal (a string
// that is not UTF-8) reaches its caller as Internal; the handler ran, so that answer
// is stored and replayed (with the response's header and trailer), rather than the
// key staying leased and the handler running again once the lease ends.
func TestDedupUnmarshallableAnswer(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			var n atomic.Int64
			call := dedupServe(t, p.opt, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
				i := n.Add(1)
				resp := connect.NewResponse(wrapperspb.String("charge \xff"))
				resp.Header().Set("X-Charge", fmt.Sprint(i))
				resp.Trailer().Set("X-Ledger", fmt.Sprint("entry-", i))
				return resp, nil
			})
			_, err := call("k", 5*time.Second)
			var fe *connect.Error
			if !errors.As(err, &fe) || fe.Code() != connect.CodeInternal || fe.Meta().Get("X-Charge") != "1" || fe.Meta().Get("X-Ledger") != "entry-1" {
				t.Fatalf("first: %v (meta %v)", err, metaOf(err))
			}
			for range 2 {
				_, err := call("k", 2*time.Second)
				var re *connect.Error
				if !errors.As(err, &re) || re.Code() != connect.CodeInternal || re.Message() != fe.Message() ||
					re.Meta().Get("Idempotent-Replayed") != "true" || re.Meta().Get("X-Charge") != "1" || re.Meta().Get("X-Ledger") != "entry-1" {
					t.Fatalf("repeat: %v (meta %v), first: %v", err, metaOf(err), fe)
				}
			}
			if n.Load() != 1 {
				t.Fatalf("handler ran %d times, want 1", n.Load())
			}
		})
	}
}

func metaOf(err error) http.Header {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Meta()
	}
	return nil
}

// timedOut waits for a deadline of ctx's child to pass and returns its error, a
// plain context.DeadlineExceeded: a handler whose own step ran out of time.
func timedOut(ctx context.Context) error {
	tctx, cancel := context.WithTimeout(ctx, time.Microsecond)
	defer cancel()
	<-tctx.Done()
	return tctx.Err()
}

// TestDedupBudgetErrorsRelease: a handler that gives up for lack of time, or
// because its caller left, with a plain Go error (ctx.Err(), shortcircuit.Check's
// refusal, the budget sentinel wrapped), which connect-go and the stack answer
// DeadlineExceeded or Canceled, releases its key: a repeat runs, rather than getting
// a stored Unknown for the retention.
func TestDedupBudgetErrorsRelease(t *testing.T) {
	cases := []struct {
		name string
		fail func(ctx context.Context, running chan<- struct{}) error
		// callerLeaves: the first caller cancels its call once the handler runs.
		callerLeaves bool
	}{
		{name: "deadline ctx.Err", fail: func(ctx context.Context, _ chan<- struct{}) error { return timedOut(ctx) }},
		{name: "wrapped ctx.Err", fail: func(ctx context.Context, _ chan<- struct{}) error { return fmt.Errorf("ledger: %w", timedOut(ctx)) }},
		{name: "caller left", callerLeaves: true, fail: func(ctx context.Context, running chan<- struct{}) error {
			close(running)
			<-ctx.Done()
			return ctx.Err()
		}},
		{name: "context.Canceled", fail: func(context.Context, chan<- struct{}) error { return context.Canceled }},
		{name: "shortcircuit.Check", fail: func(ctx context.Context, _ chan<- struct{}) error { return shortcircuit.Check(ctx, time.Hour) }},
		{name: "budget sentinel", fail: func(context.Context, chan<- struct{}) error {
			return fmt.Errorf("ledger: %w", deadline.ErrInsufficientBudget)
		}},
	}
	for _, p := range protocols {
		for _, tc := range cases {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				var n atomic.Int64
				running := make(chan struct{})
				url, hc := serve(t, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
					i := n.Add(1)
					if i == 1 {
						return nil, tc.fail(ctx, running)
					}
					return connect.NewResponse(wrapperspb.String(fmt.Sprint("charge ", i))), nil
				}, connectkit.HandlerOption(deadlinekit.WithDedup(dedup.NewMemoryStore())))
				c := client(hc, url, procPost, p.opt)
				call := func(ctx context.Context) (*connect.Response[msg], error) {
					req := connect.NewRequest(wrapperspb.String("100"))
					req.Header().Set("Idempotency-Key", "k")
					return c.CallUnary(ctx, req)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if tc.callerLeaves {
					go func() { <-running; cancel() }()
				}
				if _, err := call(ctx); err == nil || n.Load() != 1 {
					t.Fatalf("first: %v, ran %d", err, n.Load())
				}
				resp, err := call(context.Background())
				if err != nil || resp.Msg.GetValue() != "charge 2" || resp.Header().Get("Idempotent-Replayed") != "" {
					t.Fatalf("repeat: %v, want a second execution", err)
				}
			})
		}
	}
}

// TestDedupNotKept: WithMaxResponseSize bounds all that is stored (message, header,
// trailer, an error's status with its details); a repeat of an answer not kept gets
// AlreadyExists without Idempotent-Replayed (it is not the stored answer), and the
// handler runs once.
func TestDedupNotKept(t *testing.T) {
	big := strings.Repeat("x", 300)
	cases := []struct {
		name string
		h    handlerFunc
		code string
	}{
		{"message", func(context.Context, *connect.Request[msg]) (*connect.Response[msg], error) {
			return connect.NewResponse(wrapperspb.String(big)), nil
		}, "OK"},
		{"header", func(context.Context, *connect.Request[msg]) (*connect.Response[msg], error) {
			resp := connect.NewResponse(wrapperspb.String("ok"))
			resp.Header().Set("X-Big", big)
			return resp, nil
		}, "OK"},
		{"trailer", func(context.Context, *connect.Request[msg]) (*connect.Response[msg], error) {
			resp := connect.NewResponse(wrapperspb.String("ok"))
			resp.Trailer().Set("X-Big", big)
			return resp, nil
		}, "OK"},
		{"error details", func(context.Context, *connect.Request[msg]) (*connect.Response[msg], error) {
			ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("declined"))
			d, err := connect.NewErrorDetail(wrapperspb.String(big))
			if err != nil {
				return nil, err
			}
			ce.AddDetail(d)
			return nil, ce
		}, "FailedPrecondition"},
	}
	for _, p := range protocols {
		for _, tc := range cases {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				var n atomic.Int64
				call := dedupServe(t, p.opt, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
					n.Add(1)
					return tc.h(ctx, req)
				}, dedup.WithMaxResponseSize(200))
				_, ferr := call("k", 5*time.Second)
				if (ferr == nil) != (tc.code == "OK") {
					t.Fatalf("first: %v", ferr)
				}
				_, err := call("k", 5*time.Second)
				var ce *connect.Error
				if !errors.As(err, &ce) || ce.Code() != connect.CodeAlreadyExists || ce.Meta().Get("Idempotent-Replayed") != "" ||
					!strings.Contains(ce.Message(), "not kept") || !strings.Contains(ce.Message(), tc.code) {
					t.Fatalf("repeat: %v (meta %v), want AlreadyExists naming %s, unmarked", err, metaOf(err), tc.code)
				}
				if n.Load() != 1 {
					t.Fatalf("handler ran %d times, want 1", n.Load())
				}
			})
		}
	}
}
