package deadlinekit_test

import (
	"context"
	"testing"
	"time"

	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/internal/attempts"
	"github.com/deadlinekit/deadlinekit/propagate"
)

// inboundService notes, for each call, what the handler's context says of the
// request: its Inbound and whether a layer above may send it again.
type inboundService struct {
	testgrpc.UnimplementedTestServiceServer
	seen chan inboundSeen
}

type inboundSeen struct {
	in          propagate.Inbound
	ok, covered bool
}

func (s inboundService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	in, ok := propagate.InboundFromContext(ctx)
	s.seen <- inboundSeen{in: in, ok: ok, covered: attempts.Covered(ctx)}
	return &testgrpc.SimpleResponse{}, nil
}

// TestServerOptionsInbound: a handler behind ServerOptions finds the request's
// Inbound (its budget and where it came from) on its context, and the chain rule's
// mark when the caller sent it, whichever way the layers carry them.
func TestServerOptionsInbound(t *testing.T) {
	svc := inboundService{seen: make(chan inboundSeen, 1)}
	client := testService(t, svc, deadlinekit.ServerOptions())
	for _, mark := range []string{"", attempts.CoveredValue, attempts.LastCopyValue} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		if mark != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, attempts.CoveredKey, mark)
		}
		_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		cancel()
		if err != nil {
			t.Fatalf("mark %q: %v", mark, err)
		}
		got := <-svc.seen
		if !got.ok || got.in.Source != propagate.SourceGRPCTimeout || got.in.Budget <= 0 || got.in.Budget > time.Minute || got.in.Clamped {
			t.Errorf("mark %q: Inbound %+v, found %v; want the grpc-timeout's budget, at most a minute", mark, got.in, got.ok)
		}
		if want := mark == attempts.CoveredValue; got.covered != want {
			t.Errorf("mark %q: covered %v, want %v", mark, got.covered, want)
		}
	}
}
