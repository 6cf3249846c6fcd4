package deadlinekit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/deadline"
)

// An HTTP downstream refuses for lack of budget; FromHTTP turns its answer into an
// error that says so, and GRPCError into the gRPC status a handler returns.
func ExampleFromHTTP() {
	// The downstream's answer, as a guard writes it.
	rec := httptest.NewRecorder()
	deadlinekit.WriteHTTPError(rec, &deadline.BudgetError{Remaining: 7912 * time.Microsecond, Needed: 20 * time.Millisecond})
	resp := rec.Result()
	fmt.Println(resp.StatusCode, resp.Header.Get("grpc-retry-pushback-ms"))

	// In the caller's handler: resp, err := client.Do(req)
	err := deadlinekit.FromHTTP(resp, nil)
	fmt.Println(errors.Is(err, deadline.ErrInsufficientBudget), errors.Is(err, context.DeadlineExceeded))
	fmt.Println(err)

	// A gRPC handler returns deadlinekit.GRPCError(ctx, err): the trailer
	// grpc-retry-pushback-ms: -1 goes with it.
	fmt.Println(status.Code(deadlinekit.GRPCError(context.Background(), err)))
	// Output:
	// 504 -1
	// true true
	// deadlinekit: insufficient time budget: 7.9ms left, need 20ms
	// DeadlineExceeded
}

// An HTTP handler relays a gRPC downstream's refusal, trailer included.
func ExampleFromGRPC() {
	// What conn.Invoke(ctx, method, in, out, grpc.Trailer(&tr)) gave.
	callErr := status.Error(codes.DeadlineExceeded, "shortcircuit: 3ms left, floor 20ms: request refused before the handler ran")
	tr := metadata.Pairs("grpc-retry-pushback-ms", "-1")

	w := httptest.NewRecorder()
	deadlinekit.WriteHTTPError(w, deadlinekit.FromGRPC(callErr, &tr))
	fmt.Println(w.Code, w.Header().Get("grpc-retry-pushback-ms"))
	fmt.Print(w.Body.String())
	// Output:
	// 504 -1
	// shortcircuit: 3ms left, floor 20ms: request refused before the handler ran
}

// A handler answers "overloaded, come back in 2 s" with a WireError of its own.
func ExampleWriteHTTPError() {
	w := httptest.NewRecorder()
	deadlinekit.WriteHTTPError(w, &deadlinekit.WireError{Code: codes.ResourceExhausted, Pushback: 2 * time.Second, Message: "busy"})
	fmt.Println(w.Code, http.StatusText(w.Code), w.Header().Get("Retry-After"))
	// Output:
	// 503 Service Unavailable 2
}
