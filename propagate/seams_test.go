package propagate_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/propagate"
)

// A request that arrives with no time left is refused with "do not retry"
// (grpc-retry-pushback-ms: -1): a retry could only arrive with less.
func TestHTTPArrivalRefusalSaysDoNotRetry(t *testing.T) {
	h := propagate.NewMiddleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, c := range []struct {
		timeout string
		code    int
		want    string
	}{{"0n", http.StatusGatewayTimeout, "-1"}, {"10S", http.StatusOK, ""}} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("grpc-timeout", c.timeout)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.code || w.Header().Get("grpc-retry-pushback-ms") != c.want {
			t.Errorf("grpc-timeout %s: %d with grpc-retry-pushback-ms %q; want %d with %q", c.timeout, w.Code, w.Header().Get("grpc-retry-pushback-ms"), c.code, c.want)
		}
	}
}

// seamService answers the interop methods these tests call.
type seamService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (seamService) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{}, nil
}

func (seamService) StreamingOutputCall(*testgrpc.StreamingOutputCallRequest, grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error {
	return nil
}

// StreamingInputCall reads the client's messages to the end, then answers.
func (seamService) StreamingInputCall(stream grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
	n := 0
	for {
		_, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&testgrpc.StreamingInputCallResponse{AggregatedPayloadSize: int32(n)})
		}
		if err != nil {
			return err
		}
		n++
	}
}

// serveSeams starts seamService behind the server options and dials it.
func serveSeams(t *testing.T, sopts []grpc.ServerOption, dopts ...grpc.DialOption) testgrpc.TestServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(sopts...)
	testgrpc.RegisterTestServiceServer(srv, seamService{})
	go srv.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dopts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	return testgrpc.NewTestServiceClient(conn)
}

// grpc-go's own retry policy, retrying what an arrival refusal answers, does not
// retry it: the server sees one request.
func TestGRPCRetryPolicyDoesNotRetryArrivalRefusal(t *testing.T) {
	const policy = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}], "retryPolicy": {
		"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.01s", "backoffMultiplier": 1,
		"retryableStatusCodes": ["DEADLINE_EXCEEDED", "UNAVAILABLE"]}}]}`
	var unary, streams atomic.Int32
	client := serveSeams(t, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			unary.Add(1)
			return h(ctx, req)
		}, propagate.UnaryServerInterceptor(propagate.WithTrustEnvoy())),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			streams.Add(1)
			return h(srv, ss)
		}, propagate.StreamServerInterceptor(propagate.WithTrustEnvoy())),
	}, grpc.WithDefaultServiceConfig(policy))

	// No grpc-timeout; the trusted proxy says nothing is left.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-envoy-expected-rq-timeout-ms", "0")
	check := func(kind string, err error, seen int32) {
		t.Helper()
		if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(status.Convert(err).Message(), "no time left") {
			t.Errorf("%s: %v; want the refusal's DeadlineExceeded and its words", kind, err)
		}
		if seen != 1 {
			t.Errorf("%s: the server saw %d requests; want 1", kind, seen)
		}
	}
	_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
	check("unary", err, unary.Load())
	stream, err := client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	check("stream", err, streams.Load())
}

// Bug 14: a client-streaming call that ended normally (CloseAndRecv returned the
// answer) releases the context the interceptor derived for it, and its timer, at
// once rather than at the deadline.
func TestStreamClientInterceptorReleasesAFinishedClientStream(t *testing.T) {
	var derived atomic.Pointer[context.Context]
	client := serveSeams(t, nil, grpc.WithChainStreamInterceptor(
		propagate.StreamClientInterceptor(propagate.WithReserve(10*time.Millisecond)),
		func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			derived.Store(&ctx)
			return streamer(ctx, desc, cc, method, opts...)
		}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	stream, err := client.StreamingInputCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := stream.Send(&testgrpc.StreamingInputCallRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil || resp.GetAggregatedPayloadSize() != 3 {
		t.Fatalf("CloseAndRecv: %v, %v; want the answer to 3 messages", resp, err)
	}
	d := derived.Load()
	if d == nil {
		t.Fatal("the stream did not go through the interceptor")
	}
	callerDeadline, _ := ctx.Deadline()
	if dl, _ := (*d).Deadline(); !dl.Before(callerDeadline) {
		t.Fatal("the interceptor derived no shorter context; the test proves nothing")
	}
	if err := (*d).Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("the derived context is %v after the stream ended; want it released (canceled)", err)
	}
}
