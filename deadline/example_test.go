package deadline_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deadlinekit/deadlinekit/deadline"
)

// A hop received 250 ms, spent 100 ms on its own work, and now calls the next hop,
// keeping 10 ms for itself and refusing to call with less than 20 ms.
func ExamplePolicy_Budget() {
	p := deadline.Policy{Reserve: 10 * time.Millisecond, Floor: 20 * time.Millisecond}

	budget, _, err := p.Budget(150*time.Millisecond, true)
	fmt.Println(budget, err)

	_, _, err = p.Budget(25*time.Millisecond, true)
	fmt.Println(err, errors.Is(err, deadline.ErrInsufficientBudget))
	// Output:
	// 140ms <nil>
	// insufficient time budget: 25ms left, need 30ms (20ms floor + 10ms reserve) true
}

func ExamplePolicy_Derive() {
	inbound, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()

	// Give the downstream at most 200 ms, whatever the caller allowed.
	ctx, cancelCall, err := deadline.Policy{MaxPerHop: 200 * time.Millisecond}.Derive(inbound)
	if err != nil {
		fmt.Println("skip the call:", err)
		return
	}
	defer cancelCall()
	left, _ := deadline.Remaining(ctx)
	fmt.Println(left <= 200*time.Millisecond)
	// Output: true
}
