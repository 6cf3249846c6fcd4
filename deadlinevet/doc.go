// Package deadlinevet is a go/analysis pass that finds lost deadlines.
package deadlinevet
