// Package benchknob holds switches that put back an earlier rule of the toolkit, so
// that the benchmarks can run it beside the current one in the same run. Users have
// no way to reach them, and nothing but the benchmarks sets them. A component reads
// a switch once, when it is built: a benchmark sets it, builds the variant, and
// clears it.
package benchknob

import "sync/atomic"

// FirstAdaptiveLimit makes a new adaptive concurrency limit probe every cycle and
// grow back at once into a limit it has just found too high, as before issue 25's
// second step.
var FirstAdaptiveLimit atomic.Bool

// UniformWait makes a new concurrency limit predict a queued request's wait from the
// mean service time alone (slots free at a uniform rate), as before issue 25's second
// step, not from the ends of the handlers running.
var UniformWait atomic.Bool
