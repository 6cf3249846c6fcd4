package criticality_test

import (
	"context"
	"fmt"

	"github.com/deadlinekit/deadlinekit/criticality"
)

func Example() {
	ctx := context.Background()
	fmt.Println(criticality.From(ctx)) // no level: the default

	ctx = criticality.With(ctx, criticality.Sheddable) // a prefetch
	fmt.Println(criticality.From(ctx))
	fmt.Println(criticality.From(ctx) < criticality.Critical) // shed before critical work

	l, err := criticality.Parse("CRITICAL_PLUS")
	fmt.Println(l, err)
	_, err = criticality.Parse("urgent")
	fmt.Println(err)
	// Output:
	// critical
	// sheddable
	// true
	// critical_plus <nil>
	// malformed Deadlinekit-Criticality header "urgent": unknown level (want critical_plus, critical, sheddable_plus or sheddable)
}
