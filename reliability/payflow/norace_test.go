//go:build !race

package payflow_test

const raceEnabled = false
