package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"
)

// readHedgeCSV reads hedgebench -csv output and returns, for the calls of the
// given run (steady or shift), each variant's latencies in milliseconds, sorted,
// and the variants in the order they first appear.
func readHedgeCSV(r io.Reader, run string) (map[string][]float64, []string, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 3
	head, err := cr.Read()
	if err != nil {
		return nil, nil, fmt.Errorf("hedge csv: %w", err)
	}
	if !slices.Equal(head, []string{"run", "variant", "latency_ms"}) {
		return nil, nil, fmt.Errorf("hedge csv: header %q, want run,variant,latency_ms", head)
	}
	lat := map[string][]float64{}
	var order []string
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("hedge csv: %w", err)
		}
		if rec[0] != run {
			continue
		}
		ms, err := strconv.ParseFloat(rec[2], 64)
		if err != nil || ms < 0 {
			return nil, nil, fmt.Errorf("hedge csv: line %d: bad latency %q", line, rec[2])
		}
		if _, ok := lat[rec[1]]; !ok {
			order = append(order, rec[1])
		}
		lat[rec[1]] = append(lat[rec[1]], ms)
	}
	for _, xs := range lat {
		slices.Sort(xs)
	}
	return lat, order, nil
}

// survival returns, for sorted latencies, the share of calls at least as slow as
// each distinct latency: the tail on a log scale, from 1 down to 1/n.
func survival(sorted []float64) (xs, ys []float64) {
	n := float64(len(sorted))
	for i, x := range sorted {
		if i > 0 && x == sorted[i-1] {
			continue
		}
		xs = append(xs, x)
		ys = append(ys, (n-float64(i))/n)
	}
	return xs, ys
}

// admissionDoc is what admissionbench -json writes (the fields read here).
type admissionDoc struct {
	Command  string
	Time     string
	Capacity float64
	Cells    []admissionCell
}

type admissionCell struct {
	Name   string
	Config struct {
		Mode     int
		Load     float64
		Duration time.Duration
		Shape    struct {
			Knee, KneeAfter int
			KneeAt          time.Duration
		}
	}
	Results []struct {
		Variant string
		Med     struct{ Goodput float64 }
		Rounds  []round
	}
}

// round is one round's figures of a variant (the fields read here).
type round struct {
	Goodput   float64
	InHandler []int64
	Sched999  time.Duration
}

// calmest is the index of the round in which the process waited least to be
// scheduled (p99.9), the first of equals; -1 without rounds. On a busy machine a
// round can stall for hundreds of milliseconds, and its samples then show the
// machine, not the limit.
func calmest(rs []round) int {
	best := -1
	for i, r := range rs {
		if best < 0 || r.Sched999 < rs[best].Sched999 {
			best = i
		}
	}
	return best
}

func readAdmission(r io.Reader) (*admissionDoc, error) {
	var d admissionDoc
	if err := json.NewDecoder(r).Decode(&d); err != nil {
		return nil, fmt.Errorf("admission json: %w", err)
	}
	if d.Capacity <= 0 || len(d.Cells) == 0 {
		return nil, fmt.Errorf("admission json: no capacity or no cells")
	}
	return &d, nil
}

// goodputByLoad returns, for the cells of one mode (1: work stops with its
// context, 2: it ignores it), each variant's goodput as a percentage of the
// capacity against the offered load, loads ascending, and the variants in the
// order they first appear. The goodput is that of the variant's least stalled
// round (calmest), or the median when no round is kept: on a busy machine a
// stalled round measures the machine.
func goodputByLoad(d *admissionDoc, mode int) (map[string][][2]float64, []string) {
	out := map[string][][2]float64{}
	var order []string
	for _, c := range d.Cells {
		if c.Config.Mode != mode {
			continue
		}
		for _, r := range c.Results {
			if _, ok := out[r.Variant]; !ok {
				order = append(order, r.Variant)
			}
			g := r.Med.Goodput
			if k := calmest(r.Rounds); k >= 0 {
				g = r.Rounds[k].Goodput
			}
			out[r.Variant] = append(out[r.Variant], [2]float64{c.Config.Load, 100 * g / d.Capacity})
		}
	}
	for _, pts := range out {
		slices.SortFunc(pts, func(a, b [2]float64) int { return compareFloat(a[0], b[0]) })
	}
	return out, order
}

func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// means averages 10 ms samples over windows of per samples: (seconds from the
// measured part's start at the window's middle, mean). A last partial window is
// dropped.
func means(samples []int64, per int) [][2]float64 {
	var out [][2]float64
	for i := 0; per > 0 && i+per <= len(samples); i += per {
		sum := int64(0)
		for _, s := range samples[i : i+per] {
			sum += s
		}
		mid := (float64(i) + float64(per)/2) * 0.010
		out = append(out, [2]float64{mid, float64(sum) / float64(per)})
	}
	return out
}

// kneeLine is the saturation backend's knee over a cell's measured part, as a
// step: Knee until KneeAt, KneeAfter from then on (Knee throughout without one).
func kneeLine(c admissionCell) [][2]float64 {
	s, end := c.Config.Shape, c.Config.Duration.Seconds()
	if s.KneeAfter == 0 || s.KneeAt <= 0 {
		return [][2]float64{{0, float64(s.Knee)}, {end, float64(s.Knee)}}
	}
	at := s.KneeAt.Seconds()
	return [][2]float64{{0, float64(s.Knee)}, {at, float64(s.Knee)}, {at, float64(s.KneeAfter)}, {end, float64(s.KneeAfter)}}
}
