package shortcircuit_test

import (
	"context"
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

	//lint:ignore ST1019 grpc-go's convention: testgrpc for the service, testpb for its messages (one package)
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// The guard's refusal says "do not retry" (grpc-retry-pushback-ms: -1): a retry
// could only arrive with less time. An admitted request's answer says nothing.
func TestHTTPRefusalSaysDoNotRetry(t *testing.T) {
	h := shortcircuit.NewMiddleware(shortcircuit.WithFloor(floor))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, c := range []struct {
		budget time.Duration
		code   int
		want   string
	}{{belowBudget, http.StatusGatewayTimeout, "-1"}, {aboveBudget, http.StatusOK, ""}} {
		ctx, cancel := context.WithTimeout(context.Background(), c.budget)
		r := httptest.NewRequestWithContext(ctx, "GET", "/work", nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		cancel()
		if w.Code != c.code || w.Header().Get("grpc-retry-pushback-ms") != c.want {
			t.Errorf("%v left: %d with grpc-retry-pushback-ms %q; want %d with %q", c.budget, w.Code, w.Header().Get("grpc-retry-pushback-ms"), c.code, c.want)
		}
	}
}

// retryPolicy is grpc-go's own retry policy, retrying what a guard refusal answers.
const retryPolicy = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}], "retryPolicy": {
	"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.01s", "backoffMultiplier": 1,
	"retryableStatusCodes": ["DEADLINE_EXCEEDED", "UNAVAILABLE"]}}]}`

// grpc-go's own retry policy does not retry a guard refusal: the server sees one
// request, and the caller gets the refusal's words.
func TestGRPCRetryPolicyDoesNotRetryRefusal(t *testing.T) {
	var unary, streams atomic.Int32
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			unary.Add(1)
			return h(ctx, req)
		}, shortcircuit.UnaryServerInterceptor(shortcircuit.WithFloor(floor))),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			streams.Add(1)
			return h(srv, ss)
		}, shortcircuit.StreamServerInterceptor(shortcircuit.WithFloor(floor))),
	)
	testgrpc.RegisterTestServiceServer(srv, &testService{})
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(retryPolicy))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)

	check := func(kind string, err error, seen int32) {
		t.Helper()
		msg := status.Convert(err).Message()
		if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(msg, "floor 1s") {
			t.Errorf("%s: %v; want the guard's DeadlineExceeded and its words", kind, err)
		}
		if seen != 1 {
			t.Errorf("%s: the server saw %d requests; want 1", kind, seen)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), belowBudget)
	defer cancel()
	_, err = client.UnaryCall(ctx, &testpb.SimpleRequest{})
	check("unary", err, unary.Load())

	stream, err := client.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	check("stream", err, streams.Load())
}

// trailerStream is the transport stream grpc.SetTrailer writes to, keeping the
// trailer.
type trailerStream struct {
	grpc.ServerTransportStream
	trailer metadata.MD
}

func (s *trailerStream) Method() string { return "/s/U" }
func (s *trailerStream) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

// A handler's own refusal (a *BudgetError from Check) says "do not retry" as the
// guard's does; a handler's other failures say nothing.
func TestGRPCHandlerBudgetErrorSaysDoNotRetry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), aboveBudget)
	defer cancel()
	u := shortcircuit.UnaryServerInterceptor()
	for _, c := range []struct {
		err  error
		want []string
	}{
		{shortcircuit.Check(ctx, time.Hour), []string{"-1"}},
		{status.Error(codes.Unavailable, "down"), nil},
	} {
		sts := &trailerStream{}
		_, err := u(grpc.NewContextWithServerTransportStream(ctx, sts), nil, unaryInfo,
			func(context.Context, any) (any, error) { return nil, c.err })
		if got := sts.trailer.Get("grpc-retry-pushback-ms"); len(got) != len(c.want) || (len(got) > 0 && got[0] != c.want[0]) {
			t.Errorf("handler returned %v (answered %v): trailer grpc-retry-pushback-ms %q; want %q", c.err, err, got, c.want)
		}
	}
}
