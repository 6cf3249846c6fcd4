package deadlinekit_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/hedge"
)

// A method declared idempotent with WithIdempotentMethods is hedged by a shared
// Hedger too: the declaration is the client's, whichever Hedger it uses (a user who
// shared one, to read its delays, saw every call counted not idempotent and none
// hedged).
func TestSharedHedgerKeepsTheStacksIdempotentMethods(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(gs, okService{})
	go gs.Serve(lis)
	defer gs.Stop()
	h := hedge.New()
	conn, err := grpc.NewClient(lis.Addr().String(), append(deadlinekit.DialOptions(
		deadlinekit.WithIdempotentMethods("/grpc.testing.TestService/UnaryCall"), deadlinekit.WithSharedHedger(h)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	for range 3 {
		if _, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.EmptyCall(context.Background(), &testgrpc.Empty{}); err == nil {
			t.Fatal("EmptyCall answered; want UNIMPLEMENTED")
		}
	}
	if s := h.Stats(); s.Primaries != 3 || s.NotIdempotent != 3 {
		t.Errorf("shared Hedger's stats %+v; want the 3 UnaryCalls hedgeable (Primaries 3) and the 3 EmptyCalls, declared nowhere, not (NotIdempotent 3)", s)
	}
}
