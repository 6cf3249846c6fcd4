//go:build race

package exactlyonce_test

import "time"

// leaseSlack is the most time between the middleware's reading of a request's
// time left, for its lease, and the fault store's, at the start of the same
// Acquire. Under the race detector on a loaded machine a replica process was
// seen starved for 340 ms between the two; a lease taken from the wrong budget
// (the 30 s default for a request with a deadline) is still far beyond.
const leaseSlack = time.Second
