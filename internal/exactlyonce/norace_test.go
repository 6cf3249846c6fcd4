//go:build !race

package exactlyonce_test

import "time"

// leaseSlack is the most time between the middleware's reading of a request's
// time left, for its lease, and the fault store's, at the start of the same
// Acquire (see race_test.go for the race detector's).
const leaseSlack = 250 * time.Millisecond
