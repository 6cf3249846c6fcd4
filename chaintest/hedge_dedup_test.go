package chaintest_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/dedup"
	"github.com/deadlinekit/deadlinekit/hedge"
)

// hedgeSoon hedges every call 5 ms after its primary went out, from the first call.
var hedgeSoon = deadlinekit.WithHedge(hedge.WithDelay(hedge.Delay{Initial: 5 * time.Millisecond}), hedge.WithKeyedWrites())

// conflictDedup is dedup whose repeats never wait for the first: a repeat that
// arrives while the first with its key runs is answered 409 / Aborted at once
// (it keeps an hour for itself, more than any budget here).
func conflictDedup() deadlinekit.Option {
	return deadlinekit.WithDedup(dedup.NewMemoryStore(), dedup.WithFloor(time.Hour))
}

// seeConflict is a base transport that closes conflicted once a copy came back 409:
// the server answers the other copy only then, so that the 409 reaches the hedging
// layer before the real answer does.
type seeConflict struct {
	base       http.RoundTripper
	once       sync.Once
	conflicted chan struct{}
}

func (s *seeConflict) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusConflict {
		s.once.Do(func() { close(s.conflicted) })
	}
	return resp, err
}

// A keyed POST whose handler is slow enough to be hedged: one copy reaches the server
// while the other holds the key's lease (the primary, mostly; the hedge when its
// connection was ready first), and dedup answers it 409 ("the first with this key is
// still being processed"). That copy is refused, not the call's answer: the answer
// of the copy that ran, which comes after, is what the user gets, and the handler
// ran once.
func TestHedgedKeyedPOSTConflictIsNotTheAnswer(t *testing.T) {
	checkLeaks(t)
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	see := &seeConflict{base: base, conflicted: make(chan struct{})}
	conflicted := see.conflicted
	var runs atomic.Int32
	srv := httptest.NewServer(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		select {
		case <-conflicted: // the other copy came back 409 while this one ran
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "placed")
	}), conflictDedup()))
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: deadlinekit.NewTransport(see, hedgeSoon)}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("order 42"))
	req.Header.Set("Idempotency-Key", "order-42")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("the call failed: %v; want the answer of the copy that ran", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	select {
	case <-conflicted:
	default:
		t.Fatal("no copy met the other running: the test did not test anything")
	}
	if resp.StatusCode != http.StatusOK || string(body) != "placed" {
		t.Errorf("the user got %d %q; want the 200 \"placed\" of the copy that ran, not the other's 409", resp.StatusCode, body)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times; want 1", n)
	}
}

// The same over gRPC: a keyed call of a method declared nowhere as idempotent,
// hedged by the stack's client; the copy that meets the other running is answered
// Aborted with a pushback by dedup, and the other's answer is the call's.
func TestHedgedKeyedGRPCAbortedIsNotTheAnswer(t *testing.T) {
	checkLeaks(t)
	conflicted := make(chan struct{})
	var once sync.Once
	var runs atomic.Int32
	// Beneath the stack's layers: each copy, as it comes back.
	see := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if status.Code(err) == codes.Aborted {
			once.Do(func() { close(conflicted) })
		}
		return err
	})
	addr := serveHop(t, func(ctx context.Context) error {
		runs.Add(1)
		select {
		case <-conflicted:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, deadlinekit.ServerOptions(conflictDedup())...)
	conn := dial(t, addr, append(deadlinekit.DialOptions(hedgeSoon), see)...)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", "order-42")
	err := invoke(ctx, conn)
	select {
	case <-conflicted:
	default:
		t.Fatal("no copy met the other running: the test did not test anything")
	}
	if err != nil {
		t.Errorf("the call failed: %v; want the answer of the copy that ran, not the other's Aborted", err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times; want 1", n)
	}
}
