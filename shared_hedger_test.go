package deadlinekit_test

import (
	"context"
	"testing"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/hedge"
)

// A method declared idempotent with WithIdempotentMethods is hedged by a shared
// Hedger too: the declaration is the client's, whichever Hedger it uses (a user who
// shared one, to read its delays, saw every call counted not idempotent and none
// hedged).
func TestSharedHedgerKeepsTheStacksIdempotentMethods(t *testing.T) {
	h := hedge.New()
	client := testService(t, okService{}, nil, deadlinekit.DialOptions(
		deadlinekit.WithIdempotentMethods("/grpc.testing.TestService/UnaryCall"), deadlinekit.WithSharedHedger(h))...)
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
