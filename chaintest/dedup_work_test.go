package chaintest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// The rule these tests hold the stack to (DESIGN, "How a request flows"): a replay
// or a repeat waiting for the first is not the handler's work: it teaches no floor,
// holds no concurrency slot and counts in no overrun; and a stored answer is what
// the first caller received.

// keyedAnswer is what a caller of a test server got.
type keyedAnswer struct {
	ok       bool
	code     string // the HTTP status, or the gRPC / connect code
	body     string
	replayed bool
	pushback []string // grpc-retry-pushback-ms, header or trailer
}

// keyedCaller calls the server once with an idempotency key (none when empty), a
// body, and a budget. It may be called from several goroutines.
type keyedCaller func(key, body string, budget time.Duration) keyedAnswer

// keyedHandler is the handler of a test server, whatever its protocol: it answers
// the body's reply, or fails (HTTP 500, gRPC and connect Internal).
type keyedHandler func(ctx context.Context, body string) (string, error)

type keyedProtocol struct {
	name  string
	start func(t *testing.T, h keyedHandler, opts ...deadlinekit.Option) keyedCaller
}

var keyedProtocols = []keyedProtocol{
	{"http", startKeyedHTTP},
	{"grpc", startKeyedGRPC},
	{"connect", startKeyedConnect},
}

func startKeyedHTTP(t *testing.T, h keyedHandler, opts ...deadlinekit.Option) keyedCaller {
	return startKeyedHTTPWith(t, h, func(w http.ResponseWriter, err error) {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}, opts...)
}

func startKeyedHTTPWith(t *testing.T, h keyedHandler, fail func(http.ResponseWriter, error), opts ...deadlinekit.Option) keyedCaller {
	srv := httptest.NewServer(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		reply, err := h(r.Context(), string(b))
		if err != nil {
			fail(w, err)
			return
		}
		fmt.Fprint(w, reply)
	}), opts...))
	t.Cleanup(srv.Close)
	client := srv.Client()
	return func(key, body string, budget time.Duration) keyedAnswer {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader(body))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		req.Header.Set(propagate.HeaderGRPCTimeout, propagate.EncodeGRPCTimeout(budget))
		resp, err := client.Do(req)
		if err != nil {
			return keyedAnswer{code: err.Error()}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return keyedAnswer{ok: resp.StatusCode == http.StatusOK, code: strconv.Itoa(resp.StatusCode), body: string(b),
			replayed: resp.Header.Get(dedup.ReplayedHeader) == "true", pushback: resp.Header.Values("Grpc-Retry-Pushback-Ms")}
	}
}

type keyedGRPCService struct {
	testgrpc.UnimplementedTestServiceServer
	h keyedHandler
}

func (s keyedGRPCService) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	reply, err := s.h(ctx, string(req.GetPayload().GetBody()))
	if err != nil {
		if _, isStatus := status.FromError(err); !isStatus {
			err = status.Error(codes.Internal, err.Error())
		}
		return nil, err
	}
	return &testgrpc.SimpleResponse{Username: reply}, nil
}

func startKeyedGRPC(t *testing.T, h keyedHandler, opts ...deadlinekit.Option) keyedCaller {
	gs := grpc.NewServer(deadlinekit.ServerOptions(opts...)...)
	testgrpc.RegisterTestServiceServer(gs, keyedGRPCService{h: h})
	cc := dial(t, serveGRPC(t, gs))
	client := testgrpc.NewTestServiceClient(cc)
	return func(key, body string, budget time.Duration) keyedAnswer {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		if key != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
		}
		var header, trailer metadata.MD
		resp, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte(body)}},
			grpc.Header(&header), grpc.Trailer(&trailer))
		return keyedAnswer{ok: err == nil, code: status.Code(err).String(), body: resp.GetUsername(),
			replayed: len(header.Get(dedup.ReplayedKey)) > 0, pushback: trailer.Get("grpc-retry-pushback-ms")}
	}
}

func startKeyedConnect(t *testing.T, h keyedHandler, opts ...deadlinekit.Option) keyedCaller {
	const proc = "/pay.Payments/Charge"
	mux := http.NewServeMux()
	mux.Handle(proc, connect.NewUnaryHandler(proc,
		func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			reply, err := h(ctx, req.Msg.GetValue())
			if err != nil {
				var ce *connect.Error
				if !errors.As(err, &ce) {
					err = connect.NewError(connect.CodeInternal, err)
				}
				return nil, err
			}
			return connect.NewResponse(wrapperspb.String(reply)), nil
		}, connectkit.HandlerOption(opts...)))
	srv := httptest.NewUnstartedServer(mux)
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &protocols
	srv.Start()
	t.Cleanup(srv.Close)
	tr := &http.Transport{Protocols: &protocols}
	t.Cleanup(tr.CloseIdleConnections)
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](&http.Client{Transport: tr}, srv.URL+proc, connect.WithGRPC())
	return func(key, body string, budget time.Duration) keyedAnswer {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		req := connect.NewRequest(wrapperspb.String(body))
		if key != "" {
			req.Header().Set("Idempotency-Key", key)
		}
		resp, err := client.CallUnary(ctx, req)
		if err != nil {
			a := keyedAnswer{code: connect.CodeOf(err).String()}
			var ce *connect.Error
			if errors.As(err, &ce) {
				a.replayed = ce.Meta().Get(dedup.ReplayedHeader) == "true"
				a.pushback = ce.Meta().Values("Grpc-Retry-Pushback-Ms")
			}
			return a
		}
		return keyedAnswer{ok: true, code: "ok", body: resp.Msg.GetValue(), replayed: resp.Header().Get(dedup.ReplayedHeader) == "true",
			pushback: resp.Trailer().Values("Grpc-Retry-Pushback-Ms")}
	}
}

// TestDedupReplaysTeachNoFloor: a 40 ms route learns its floor from 20 keyed
// writes; 40 replays of one of them (microseconds each, no handler) must not teach
// it that the route is fast: a request with 15 ms left is still refused before the
// handler runs.
func TestDedupReplaysTeachNoFloor(t *testing.T) {
	for _, p := range keyedProtocols {
		t.Run(p.name, func(t *testing.T) {
			var probes atomic.Int32
			call := p.start(t, func(ctx context.Context, body string) (string, error) {
				if body == "probe" {
					probes.Add(1)
					return "probed", nil
				}
				time.Sleep(40 * time.Millisecond)
				return "done " + body, nil
			}, deadlinekit.WithDedup(dedup.NewMemoryStore()))
			var wg sync.WaitGroup
			for i := range 20 {
				wg.Go(func() {
					if a := call(fmt.Sprint("write-", i), fmt.Sprint(i), time.Minute); !a.ok {
						t.Errorf("write %d: %+v", i, a)
					}
				})
			}
			wg.Wait()
			for i := range 40 {
				if a := call("write-0", "0", time.Minute); !a.ok || !a.replayed || a.body != "done 0" {
					t.Fatalf("replay %d: %+v", i, a)
				}
			}
			a := call("", "probe", 15*time.Millisecond)
			if a.ok || probes.Load() != 0 {
				t.Fatalf("a request with 15 ms left on a 40 ms route was admitted (%+v): the replays taught the floor", a)
			}
		})
	}
}

// waitSignal is a Store that tells when a repeat starts waiting for the first
// request with its key.
type waitSignal struct {
	dedup.Store
	waiting chan string
}

func (s *waitSignal) Wait(ctx context.Context, key string) (dedup.Entry, error) {
	s.waiting <- key
	return s.Store.Wait(ctx, key)
}

// TestDedupWaitHoldsNoSlot: with a concurrency limit of 2 (no queue), a slow keyed
// write and its repeat, which waits for the first's answer, leave a slot for an
// unrelated request; the repeat then gets the first's answer.
func TestDedupWaitHoldsNoSlot(t *testing.T) {
	for _, p := range keyedProtocols {
		t.Run(p.name, func(t *testing.T) {
			store := &waitSignal{Store: dedup.NewMemoryStore(), waiting: make(chan string, 1)}
			started, release := make(chan struct{}, 1), make(chan struct{})
			var runs atomic.Int32
			call := p.start(t, func(ctx context.Context, body string) (string, error) {
				if body != "slow" {
					return "other", nil
				}
				runs.Add(1)
				started <- struct{}{}
				<-release
				return "charged", nil
			}, deadlinekit.WithDedup(store), deadlinekit.WithShortCircuit(shortcircuit.WithMaxConcurrency(2), shortcircuit.WithQueue(0, shortcircuit.FIFO)))
			first, repeat := make(chan keyedAnswer, 1), make(chan keyedAnswer, 1)
			go func() { first <- call("order-1", "slow", time.Minute) }()
			<-started
			go func() { repeat <- call("order-1", "slow", time.Minute) }()
			<-store.waiting
			other := call("", "other", time.Minute)
			close(release)
			a1, a2 := <-first, <-repeat
			if !other.ok {
				t.Errorf("an unrelated request was refused while a repeat waited: %+v", other)
			}
			if !a1.ok || a1.body != "charged" || !a2.ok || a2.body != "charged" || !a2.replayed || runs.Load() != 1 {
				t.Errorf("first %+v, repeat %+v, %d runs: want one run, its answer replayed", a1, a2, runs.Load())
			}
		})
	}
}

// TestDedupTakeOverIsAdmittedAgain: two replicas share one store. A repeat that
// waits on replica B (concurrency limit 1, no queue) for the first, which runs on
// A, gives B's slot to an unrelated request; when the first forgets, the repeat
// takes the key over, and runs the handler only if B's guard admits it again.
// Refused (the slot is taken), it records nothing, and the next repeat runs.
func TestDedupTakeOverIsAdmittedAgain(t *testing.T) {
	for _, p := range keyedProtocols {
		t.Run(p.name, func(t *testing.T) {
			store := &waitSignal{Store: dedup.NewMemoryStore(), waiting: make(chan string, 1)}
			started, release := make(chan struct{}, 1), make(chan struct{})
			holding, unhold := make(chan struct{}, 1), make(chan struct{})
			var runs atomic.Int32
			h := func(ctx context.Context, body string) (string, error) {
				if body == "hold" {
					holding <- struct{}{}
					<-unhold
					return "held", nil
				}
				n := runs.Add(1)
				if n > 1 {
					return "charged", nil
				}
				started <- struct{}{}
				<-release
				dedup.Forget(ctx) // nothing happened: a repeat may run it
				return "", errors.New("the ledger was down")
			}
			callA := p.start(t, h, deadlinekit.WithDedup(store))
			callB := p.start(t, h, deadlinekit.WithDedup(store), deadlinekit.WithShortCircuit(shortcircuit.WithMaxConcurrency(1), shortcircuit.WithQueue(0, shortcircuit.FIFO)))
			closeRelease, closeUnhold := sync.OnceFunc(func() { close(release) }), sync.OnceFunc(func() { close(unhold) })
			t.Cleanup(closeRelease) // before the servers close, on a failure
			t.Cleanup(closeUnhold)
			first, repeat, other := make(chan keyedAnswer, 1), make(chan keyedAnswer, 1), make(chan keyedAnswer, 1)
			go func() { first <- callA("order-1", "pay", time.Minute) }()
			<-started
			go func() { repeat <- callB("order-1", "pay", time.Minute) }()
			<-store.waiting
			go func() { other <- callB("", "hold", time.Minute) }()
			select {
			case <-holding:
			case a := <-other:
				t.Fatalf("an unrelated request was refused while a repeat waited: %+v", a)
			}
			closeRelease()
			if a := <-first; a.ok {
				t.Fatalf("first: %+v", a)
			}
			a := <-repeat
			closeUnhold()
			if a.ok || a.replayed || runs.Load() != 1 {
				t.Fatalf("repeat taking the key over with the slot taken: %+v, %d runs; want the guard's refusal", a, runs.Load())
			}
			if o := <-other; !o.ok {
				t.Fatalf("unrelated: %+v", o)
			}
			if a := callB("order-1", "pay", time.Minute); !a.ok || a.replayed || a.body != "charged" || runs.Load() != 2 {
				t.Fatalf("the next repeat: %+v, %d runs; want it to run the handler", a, runs.Load())
			}
		})
	}
}

// TestDedupReplayCarriesDoNotRetry: the handler's own retry layer gave up on its
// downstream and the handler relays the failure; retry's server side tells the
// first caller "do not retry" (grpc-retry-pushback-ms: -1). A repeat gets the
// stored answer, and the stored answer is what the first caller received: with
// "do not retry", not an invitation to retry what was retried already.
func TestDedupReplayCarriesDoNotRetry(t *testing.T) {
	for _, p := range keyedProtocols {
		t.Run(p.name, func(t *testing.T) {
			var calls atomic.Int32
			down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				http.Error(w, "down", http.StatusServiceUnavailable)
			}))
			defer down.Close()
			client := stackClient(t)
			call := p.start(t, func(ctx context.Context, body string) (string, error) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, down.URL, nil)
				resp, err := client.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				switch p.name {
				case "http":
					return "", errors.New("the ledger is unavailable") // 500
				case "grpc":
					return "", status.Error(codes.Unavailable, "the ledger is unavailable")
				}
				return "", connect.NewError(connect.CodeUnavailable, errors.New("the ledger is unavailable"))
			}, deadlinekit.WithDedup(dedup.NewMemoryStore()))
			a1 := call("order-1", "pay", time.Minute)
			a2 := call("order-1", "pay", time.Minute)
			if a1.ok || fmt.Sprint(a1.pushback) != "[-1]" {
				t.Fatalf("first: %+v; want a failure with grpc-retry-pushback-ms: -1", a1)
			}
			if !a2.replayed || a2.code != a1.code || fmt.Sprint(a2.pushback) != "[-1]" {
				t.Fatalf("replay: %+v; want the first's answer %+v, with grpc-retry-pushback-ms: -1", a2, a1)
			}
			if calls.Load() != 3 { // one run of the handler, three attempts
				t.Fatalf("downstream called %d times, want 3", calls.Load())
			}
		})
	}
}

// TestDedupComeBackIsNotFinal: a handler that answers "come back in N" (HTTP 503
// with Retry-After; gRPC and connect Unavailable or ResourceExhausted with a
// non-negative grpc-retry-pushback-ms) did not complete: its key is released, and
// coming back runs the handler, whose answer is then stored and replayed.
func TestDedupComeBackIsNotFinal(t *testing.T) {
	for _, p := range keyedProtocols {
		t.Run(p.name, func(t *testing.T) {
			var runs atomic.Int32
			var call keyedCaller
			h := func(ctx context.Context, body string) (string, error) {
				if runs.Add(1) > 1 {
					return "charged", nil
				}
				switch p.name {
				case "grpc":
					_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "200"))
					return "", status.Error(codes.ResourceExhausted, "busy: come back in 200 ms")
				case "connect":
					ce := connect.NewError(connect.CodeUnavailable, errors.New("busy: come back in 200 ms"))
					ce.Meta().Set("Grpc-Retry-Pushback-Ms", "200")
					return "", ce
				}
				return "", errComeBack
			}
			if p.name == "http" {
				call = startComeBackHTTP(t, h)
			} else {
				call = p.start(t, h, deadlinekit.WithDedup(dedup.NewMemoryStore()))
			}
			if a := call("order-1", "pay", time.Minute); a.ok {
				t.Fatalf("first: %+v", a)
			}
			if a := call("order-1", "pay", time.Minute); !a.ok || a.replayed || a.body != "charged" || runs.Load() != 2 {
				t.Fatalf("coming back: %+v after %d runs; want the handler to run again", a, runs.Load())
			}
			if a := call("order-1", "pay", time.Minute); !a.ok || !a.replayed || a.body != "charged" || runs.Load() != 2 {
				t.Fatalf("repeat: %+v after %d runs; want the stored answer", a, runs.Load())
			}
		})
	}
}

var errComeBack = errors.New("busy: come back in 1 s")

// startComeBackHTTP is startKeyedHTTP whose handler answers errComeBack as 503 with
// Retry-After: 1.
func startComeBackHTTP(t *testing.T, h keyedHandler) keyedCaller {
	return startKeyedHTTPWith(t, h, func(w http.ResponseWriter, err error) {
		if errors.Is(err, errComeBack) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}, deadlinekit.WithDedup(dedup.NewMemoryStore()))
}
