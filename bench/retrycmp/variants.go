package retrycmp

import (
	"context"
	"time"

	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/failsafegrpc"
	gmretry "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/deadlinekit/deadlinekit/retry"
)

// Variant is one contender: the retry layer put on every arrow of the chain.
type Variant struct {
	Name string
	// Note says how the variant is configured.
	Note string
	// Client returns the retry interceptor of one client. It is called once per arrow
	// (user → L1, L1 → L2, L2 → bottom), so each layer has state (a budget) of its own,
	// as separate processes would.
	Client func() grpc.UnaryClientInterceptor
	// Server, when not nil, returns the server interceptor of the middle layers.
	Server func() grpc.UnaryServerInterceptor
	// Bound, when not nil, is the most retries the budget of one client allows within
	// one budget time-to-live that follows the given number of successes.
	Bound func(successes int) int
	// SustainedOnly variants differ from another one only by a retry budget, which a
	// few sequential requests never reach: they run in the sustained outage only.
	SustainedOnly bool
}

// Attempts is the number of attempts (first one included) every variant makes per
// layer.
const Attempts = 3

// Variants returns the contenders, in table order.
func Variants() []Variant {
	return []Variant{
		{
			Name: "no toolkit (each layer retries 3× at once)",
			Note: "a hand-written interceptor: up to 3 attempts on any error while the call's context is live, no wait, no budget",
			Client: func() grpc.UnaryClientInterceptor {
				return naive
			},
		},
		{
			Name: "deadlinekit/retry",
			Note: "retry.UnaryClientInterceptor(retry.WithMaxAttempts(3)) on every client and retry.UnaryServerInterceptor() on L1 and L2; otherwise defaults: backoff 20 ms doubling to 500 ms ±20%, a budget per client of 10% of successes + 10 retries/s over 10 s",
			Client: func() grpc.UnaryClientInterceptor {
				return retry.UnaryClientInterceptor(retry.WithMaxAttempts(Attempts))
			},
			Server: func() grpc.UnaryServerInterceptor { return retry.UnaryServerInterceptor() },
			Bound:  deadlinekitBound(budgetMinPerSecond),
		},
		{
			Name: "deadlinekit/retry (budget floor 1/s)",
			Note: "as deadlinekit/retry, with retry.WithBudget(retry.NewBudget(0.1, 1, 10*time.Second)) per client: the same 10% ratio with a floor of 1 retry/s instead of 10, to show the ratio rather than the floor",
			Client: func() grpc.UnaryClientInterceptor {
				return retry.UnaryClientInterceptor(retry.WithMaxAttempts(Attempts),
					retry.WithBudget(retry.NewBudget(budgetRatio, 1, budgetTTL)))
			},
			Server:        func() grpc.UnaryServerInterceptor { return retry.UnaryServerInterceptor() },
			Bound:         deadlinekitBound(1),
			SustainedOnly: true,
		},
		{
			Name: "go-grpc-middleware v2.3.4 retry",
			Note: "retry.UnaryClientInterceptor(retry.WithMax(3)) (WithMax counts attempts, the first one included; the default is 0, no retry); default backoff linear 50 ms ±10%, default codes UNAVAILABLE and RESOURCE_EXHAUSTED; no budget and no server side in the library",
			Client: func() grpc.UnaryClientInterceptor {
				return gmretry.UnaryClientInterceptor(gmretry.WithMax(Attempts))
			},
		},
		{
			Name: "failsafe-go v0.9.8 retrypolicy",
			Note: "failsafegrpc.NewUnaryClientInterceptor(failsafegrpc.NewRetryPolicyBuilder().WithMaxAttempts(3).Build()); defaults: no delay between attempts, codes UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, no budget",
			Client: func() grpc.UnaryClientInterceptor {
				p := failsafegrpc.NewRetryPolicyBuilder[*testgrpc.SimpleResponse]().WithMaxAttempts(Attempts).Build()
				return failsafegrpc.NewUnaryClientInterceptor(p)
			},
		},
		{
			Name: "failsafe-go v0.9.8 retrypolicy + budget",
			Note: "as failsafe-go retrypolicy, with .WithBudget(budget.New()) per client: failsafe's budget limits concurrent retries to a share (default 20%) of the executions in flight, never below 3 in flight (default minConcurrency)",
			Client: func() grpc.UnaryClientInterceptor {
				p := failsafegrpc.NewRetryPolicyBuilder[*testgrpc.SimpleResponse]().WithMaxAttempts(Attempts).WithBudget(budget.New()).Build()
				return failsafegrpc.NewUnaryClientInterceptor(p)
			},
			SustainedOnly: true,
		},
	}
}

// naive retries any failure up to [Attempts] times at once, as long as the call's
// context is live: what each layer does without a toolkit.
func naive(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var err error
	for range Attempts {
		if err = invoker(ctx, method, req, reply, cc, opts...); err == nil || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// The retry budget deadlinekit/retry gives a client without retry.WithBudget:
// retries up to 10% of the successes of the last 10 s, plus 10 per second.
const (
	budgetRatio        = 0.1
	budgetMinPerSecond = 10
	budgetTTL          = 10 * time.Second
)

// deadlinekitBound is the most retries one deadlinekit client may make within one TTL
// after successes successes, with the given floor: ratio × successes + floor × TTL.
func deadlinekitBound(floor float64) func(int) int {
	return func(successes int) int {
		return int(budgetRatio*float64(successes) + floor*budgetTTL.Seconds())
	}
}
