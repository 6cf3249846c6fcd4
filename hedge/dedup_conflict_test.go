package hedge_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/hedge"
)

// soon hedges every call 5 ms after its primary, from the first call.
var soon = hedge.WithDelay(hedge.Delay{Initial: 5 * time.Millisecond})

// dedupNoWait is a dedup whose repeats never wait for the first: a repeat that comes
// while the first with its key runs is answered 409 / ABORTED with a pushback at once.
var dedupNoWait = dedup.WithFloor(time.Hour)

// closeOnce closes a channel the first time it is called.
type closeOnce struct {
	once sync.Once
	ch   chan struct{}
}

func (c *closeOnce) close() { c.once.Do(func() { close(c.ch) }) }

// The hedging transport alone over a server that deduplicates: the copy of a keyed
// POST that meets the other running is answered 409 with a pushback; it is refused,
// and the answer of the copy that ran is the call's. A 409 without a pushback (the
// application's own conflict) stays an answer.
func TestHTTPKeyedConflictRefused(t *testing.T) {
	conflicted := &closeOnce{ch: make(chan struct{})}
	var runs atomic.Int32
	srv := httptest.NewServer(dedup.NewMiddleware(dedup.NewMemoryStore(), dedupNoWait)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		select {
		case <-conflicted.ch:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "placed")
	})))
	t.Cleanup(srv.Close)
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	see := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := base.RoundTrip(r)
		if err == nil && resp.StatusCode == http.StatusConflict {
			conflicted.close()
		}
		return resp, err
	})
	h := hedge.New(soon, hedge.WithKeyedWrites())
	client := &http.Client{Transport: h.Transport(see)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("order 7"))
	req.Header.Set("Idempotency-Key", "order-7")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	select {
	case <-conflicted.ch:
	default:
		t.Fatal("no copy met the other running: the test did not test anything")
	}
	if resp.StatusCode != http.StatusOK || string(body) != "placed" || runs.Load() != 1 {
		t.Errorf("got %d %q after %d runs; want 200 \"placed\" after 1", resp.StatusCode, body, runs.Load())
	}

	// The application's 409, without a pushback, is an answer: any copy would get it.
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "already placed", http.StatusConflict)
	}))
	t.Cleanup(app.Close)
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, app.URL, strings.NewReader("order 7"))
	req.Header.Set("Idempotency-Key", "order-8")
	resp, err = (&http.Client{Transport: hedge.New(soon, hedge.WithKeyedWrites()).Transport(base)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("the application's 409 became %d", resp.StatusCode)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// conflictService runs UnaryCall until conflicted is closed.
type conflictService struct {
	testgrpc.UnimplementedTestServiceServer
	conflicted *closeOnce
	runs       atomic.Int32
}

func (s *conflictService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.runs.Add(1)
	select {
	case <-s.conflicted.ch:
		return &testgrpc.SimpleResponse{}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// The interceptor alone, without a caller asking for the trailer: the copy of a
// keyed call that dedup answers ABORTED with a pushback is refused, whichever copy
// it is, and the answer of the copy that ran is the call's.
func TestGRPCKeyedAbortedRefused(t *testing.T) {
	svc := &conflictService{conflicted: &closeOnce{ch: make(chan struct{})}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.UnaryInterceptor(dedup.UnaryServerInterceptor(dedup.NewMemoryStore(), dedupNoWait)))
	testgrpc.RegisterTestServiceServer(gs, svc)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	see := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if status.Code(err) == codes.Aborted {
			svc.conflicted.close()
		}
		return err
	}
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(hedge.UnaryClientInterceptor(soon, hedge.WithKeyedWrites()), see))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", "order-7")
	_, err = testgrpc.NewTestServiceClient(conn).UnaryCall(ctx, &testgrpc.SimpleRequest{})
	select {
	case <-svc.conflicted.ch:
	default:
		t.Fatal("no copy met the other running: the test did not test anything")
	}
	if err != nil || svc.runs.Load() != 1 {
		t.Errorf("got %v after %d runs; want the answer of the copy that ran, after 1", err, svc.runs.Load())
	}
}
