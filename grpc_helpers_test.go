package deadlinekit_test

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// testService serves svc on a loopback gRPC server built with srv, and returns a
// client of it dialled with dial (plaintext added); both stop when t ends.
func testService(t testing.TB, svc testgrpc.TestServiceServer, srv []grpc.ServerOption, dial ...grpc.DialOption) testgrpc.TestServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(srv...)
	testgrpc.RegisterTestServiceServer(gs, svc)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return testgrpc.NewTestServiceClient(conn)
}
