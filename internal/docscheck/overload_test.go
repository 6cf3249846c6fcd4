package docscheck

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// fullQueue is a guard with one slot and no queue: a second request at once finds
// it full.
var fullQueue = deadlinekit.WithShortCircuit(shortcircuit.WithMaxConcurrency(1), shortcircuit.WithQueue(0, shortcircuit.FIFO))

// TestFullQueueHTTP holds docs/overload.md's row "the queue is full" for HTTP: 503
// with Retry-After, a positive grpc-retry-pushback-ms, and "the handler did not run".
func TestFullQueueHTTP(t *testing.T) {
	entered, release := make(chan struct{}, 2), make(chan struct{})
	srv := httptest.NewServer(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}), fullQueue))
	defer srv.Close()
	defer close(release)
	go http.Get(srv.URL) // takes the slot
	<-entered

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	h := resp.Header
	if resp.StatusCode != http.StatusServiceUnavailable || h.Get("Retry-After") == "" ||
		positive(h.Get("Grpc-Retry-Pushback-Ms")) != nil || h.Get("Deadlinekit-Unprocessed") != "1" {
		t.Errorf("full queue over HTTP: %d, Retry-After %q, pushback %q, unprocessed %q; want 503, a Retry-After, a positive pushback, 1",
			resp.StatusCode, h.Get("Retry-After"), h.Get("Grpc-Retry-Pushback-Ms"), h.Get("Deadlinekit-Unprocessed"))
	}
}

// TestFullQueueGRPC holds the same row for gRPC: ResourceExhausted (not
// Unavailable) with google.rpc.RetryInfo, a positive grpc-retry-pushback-ms, and
// "the handler did not run".
func TestFullQueueGRPC(t *testing.T) {
	entered, release := make(chan struct{}, 2), make(chan struct{})
	srv := grpc.NewServer(deadlinekit.ServerOptions(fullQueue)...)
	healthpb.RegisterHealthServer(srv, blocking{entered, release})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	defer close(release)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	go client.Check(context.Background(), &healthpb.HealthCheckRequest{}) // takes the slot
	<-entered

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var tr metadata.MD
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&tr))
	st := status.Convert(err)
	var retryInfo bool
	for _, d := range st.Details() {
		_, ok := d.(*errdetails.RetryInfo)
		retryInfo = retryInfo || ok
	}
	pushback, unprocessed := first(tr, "grpc-retry-pushback-ms"), first(tr, "deadlinekit-unprocessed")
	if st.Code() != codes.ResourceExhausted || !retryInfo || positive(pushback) != nil || unprocessed != "1" {
		t.Errorf("full queue over gRPC: %v, RetryInfo %v, pushback %q, unprocessed %q; want ResourceExhausted, RetryInfo, a positive pushback, 1",
			st.Code(), retryInfo, pushback, unprocessed)
	}
}

type blocking struct {
	entered, release chan struct{}
}

func (b blocking) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	b.entered <- struct{}{}
	<-b.release
	return &healthpb.HealthCheckResponse{}, nil
}

func (blocking) List(context.Context, *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	return nil, status.Error(codes.Unimplemented, "")
}

func (blocking) Watch(*healthpb.HealthCheckRequest, healthpb.Health_WatchServer) error {
	return status.Error(codes.Unimplemented, "")
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// positive returns an error unless s is a positive whole number of milliseconds.
func positive(s string) error {
	n, err := strconv.Atoi(s)
	if err == nil && n <= 0 {
		err = strconv.ErrRange
	}
	return err
}
