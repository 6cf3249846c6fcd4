package breaker

// WithRandom replaces the breaker's source of random numbers (the sleep's jitter,
// the throttle's draws), for the external tests that need a reproducible sequence.
var WithRandom = withRandom
