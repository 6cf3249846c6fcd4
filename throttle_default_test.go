package deadlinekit_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
)

// The client-side throttle is on in the default stack: a client of a server that
// is up but refuses most of what it is sent for load ("overloaded, come back in 1
// ms", as the toolkit's servers answer) sends it a small share of the calls it is
// asked for, where without the throttle every call, and its retries, reach the
// server. The figures are counts, not times: the throttle's window (30 s) holds
// every call of the test however slowly a loaded machine runs it, and its steady
// state does not depend on when the window moves on.

// throttleCalls is how many calls each case asks its client for.
const throttleCalls = 400

// refusing returns whether the server refuses its n-th call (from 1): four in five
// when overloaded, none when healthy.
func refusing(overloaded bool) func(n int64) bool {
	return func(n int64) bool { return overloaded && n%5 != 0 }
}

// httpRefuser is a loopback HTTP server that refuses for load as refuse says, and
// counts what reaches it.
func httpRefuser(t *testing.T, refuse func(n int64) bool) (string, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refuse(hits.Add(1)) {
			w.Header().Set("grpc-retry-pushback-ms", "1")
			w.Header().Set("Retry-After", "1")
			http.Error(w, "overloaded, come back in 1 ms", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &hits
}

// askHTTP sends throttleCalls GETs to url through a deadlinekit.NewTransport built
// with opts, and returns how many the client refused itself (the throttle's
// refusals); any other outcome than an answer, a 503 or a throttle refusal fails t.
func askHTTP(t *testing.T, url string, opts ...deadlinekit.Option) (throttled int) {
	t.Helper()
	client := &http.Client{Transport: deadlinekit.NewTransport(nil, opts...)}
	defer client.CloseIdleConnections()
	for range throttleCalls {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		switch {
		case errors.Is(err, breaker.ErrThrottled):
			throttled++
		case err != nil:
			t.Fatal(err)
		default:
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("status %d", resp.StatusCode)
			}
		}
	}
	return throttled
}

func TestDefaultTransportThrottlesARefusingServer(t *testing.T) {
	sent := map[string]int64{}
	for _, c := range []struct {
		name string
		opts []deadlinekit.Option
	}{
		{"default", nil},
		{"throttle off", []deadlinekit.Option{deadlinekit.WithBreaker(breaker.WithoutAdaptiveThrottling())}},
	} {
		url, hits := httpRefuser(t, refusing(true))
		throttled := askHTTP(t, url, c.opts...)
		sent[c.name] = hits.Load()
		t.Logf("%s: the server saw %d calls (retries included) for %d asked; %d throttled", c.name, hits.Load(), throttleCalls, throttled)
	}
	// Without the throttle, every call asked for reaches the server (and some
	// retries); with it, the server accepting a fifth of what it gets (below 1/K)
	// is sent a small share.
	if sent["throttle off"] < throttleCalls || sent["default"]*4 > throttleCalls {
		t.Fatalf("the server saw %d calls from a default client, %d with the throttle off, for %d asked: want at most a quarter, and all",
			sent["default"], sent["throttle off"], throttleCalls)
	}
}

func TestDefaultTransportNeverThrottlesAHealthyServer(t *testing.T) {
	url, hits := httpRefuser(t, refusing(false))
	if throttled := askHTTP(t, url); throttled != 0 || hits.Load() < throttleCalls {
		t.Fatalf("a healthy server: %d calls throttled, %d reached it, of %d", throttled, hits.Load(), throttleCalls)
	}
}

// grpcRefuser refuses for load as refuse says: RESOURCE_EXHAUSTED with RetryInfo
// and grpc-retry-pushback-ms, "come back in 1 ms".
type grpcRefuser struct {
	testgrpc.UnimplementedTestServiceServer
	hits   atomic.Int64
	refuse func(n int64) bool
}

func (s *grpcRefuser) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if !s.refuse(s.hits.Add(1)) {
		return &testgrpc.SimpleResponse{}, nil
	}
	_ = grpc.SetTrailer(ctx, map[string][]string{"grpc-retry-pushback-ms": {"1"}})
	st, err := status.New(codes.ResourceExhausted, "overloaded, come back in 1 ms").
		WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Millisecond)})
	if err != nil {
		return nil, err
	}
	return nil, st.Err()
}

// askGRPC serves s on loopback, sends it throttleCalls unary calls through a
// client dialled with deadlinekit.DialOptions(opts...), and returns how many the
// client refused itself; any other outcome than an answer, RESOURCE_EXHAUSTED from
// the server or a throttle refusal fails t.
func askGRPC(t *testing.T, s *grpcRefuser, opts ...deadlinekit.Option) (throttled int) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(gs, s)
	go gs.Serve(lis)
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), append(deadlinekit.DialOptions(opts...),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	for range throttleCalls {
		_, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{})
		switch {
		case errors.Is(err, breaker.ErrThrottled):
			throttled++
		case err != nil && status.Code(err) != codes.ResourceExhausted:
			t.Fatal(err)
		}
	}
	return throttled
}

func TestDefaultDialOptionsThrottleARefusingServer(t *testing.T) {
	sent := map[string]int64{}
	for _, c := range []struct {
		name string
		opts []deadlinekit.Option
	}{
		{"default", nil},
		{"throttle off", []deadlinekit.Option{deadlinekit.WithBreaker(breaker.WithoutAdaptiveThrottling())}},
	} {
		s := &grpcRefuser{refuse: refusing(true)}
		throttled := askGRPC(t, s, c.opts...)
		sent[c.name] = s.hits.Load()
		t.Logf("%s: the server saw %d calls for %d asked; %d throttled", c.name, s.hits.Load(), throttleCalls, throttled)
	}
	if sent["throttle off"] < throttleCalls || sent["default"]*4 > throttleCalls {
		t.Fatalf("the server saw %d calls from a default client, %d with the throttle off, for %d asked: want at most a quarter, and all",
			sent["default"], sent["throttle off"], throttleCalls)
	}
}

func TestDefaultDialOptionsNeverThrottleAHealthyServer(t *testing.T) {
	s := &grpcRefuser{refuse: refusing(false)}
	if throttled := askGRPC(t, s); throttled != 0 || s.hits.Load() < throttleCalls {
		t.Fatalf("a healthy server: %d calls throttled, %d reached it, of %d", throttled, s.hits.Load(), throttleCalls)
	}
}
