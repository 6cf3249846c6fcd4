//go:build race

package payflow_test

// raceEnabled: built with -race, every process of the chain runs several times
// slower, so the share of payments answered across the outage is a figure of the
// race detector's cost, not of the toolkit's; the checks of what was charged hold.
const raceEnabled = true
