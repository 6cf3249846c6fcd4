package main

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestReadHedgeCSV(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		run     string
		want    map[string][]float64
		order   []string
		wantErr bool
	}{
		{
			name:  "sorted per variant, the other run left out",
			in:    "run,variant,latency_ms\nsteady,a,5.5\nsteady,b,50\nsteady,a,1.25\nshift,a,99\n",
			run:   "steady",
			want:  map[string][]float64{"a": {1.25, 5.5}, "b": {50}},
			order: []string{"a", "b"},
		},
		{
			name:  "a variant name with a comma, quoted",
			in:    "run,variant,latency_ms\nshift,\"failsafe-go, fixed\",7.000\n",
			run:   "shift",
			want:  map[string][]float64{"failsafe-go, fixed": {7}},
			order: []string{"failsafe-go, fixed"},
		},
		{name: "no header", in: "steady,a,5\n", run: "steady", wantErr: true},
		{name: "empty", in: "", run: "steady", wantErr: true},
		{name: "bad latency", in: "run,variant,latency_ms\nsteady,a,fast\n", run: "steady", wantErr: true},
		{name: "negative latency", in: "run,variant,latency_ms\nsteady,a,-1\n", run: "steady", wantErr: true},
		{name: "short line", in: "run,variant,latency_ms\nsteady,a\n", run: "steady", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, order, err := readHedgeCSV(strings.NewReader(tc.in), tc.run)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(order, tc.order) {
				t.Errorf("got %v %v, want %v %v", got, order, tc.want, tc.order)
			}
		})
	}
}

func TestSurvival(t *testing.T) {
	xs, ys := survival([]float64{1, 2, 2, 10})
	if want := []float64{1, 2, 10}; !reflect.DeepEqual(xs, want) {
		t.Errorf("xs = %v, want %v", xs, want)
	}
	if want := []float64{1, 0.75, 0.25}; !reflect.DeepEqual(ys, want) {
		t.Errorf("ys = %v, want %v", ys, want)
	}
}

const admissionJSON = `{
 "Command": "cd bench && go run ./cmd/admissionbench -json x",
 "Time": "2026-12-04T23:00:00Z",
 "Capacity": 800,
 "Cells": [
  {"Name": "stops, 2×", "Config": {"Mode": 1, "Load": 2, "Duration": 1000000000},
   "Results": [{"Variant": "b", "Med": {"Goodput": 700}, "Rounds": [{"Goodput": 100, "Sched999": 9}, {"Goodput": 760, "Sched999": 1}, {"Goodput": 700, "Sched999": 5}]},
    {"Variant": "a", "Med": {"Goodput": 400}}]},
  {"Name": "stops, 0.5×", "Config": {"Mode": 1, "Load": 0.5, "Duration": 1000000000},
   "Results": [{"Variant": "b", "Med": {"Goodput": 396}}]},
  {"Name": "ignores, 2×", "Config": {"Mode": 2, "Load": 2, "Duration": 1000000000},
   "Results": [{"Variant": "a", "Med": {"Goodput": 0}}]},
  {"Name": "shared saturation, knee 8 → 4, stops, 2×",
   "Config": {"Mode": 1, "Load": 2, "Duration": 4000000000, "Shape": {"Knee": 8, "KneeAfter": 4, "KneeAt": 2000000000}},
   "Results": [{"Variant": "c", "Med": {"Goodput": 500}, "Rounds": [{"InHandler": [0, 0], "Sched999": 200000000}, {"Goodput": 480, "InHandler": [8, 10, 9, 9, 5], "Sched999": 300000}]}]}
 ]
}`

func TestReadAdmission(t *testing.T) {
	d, err := readAdmission(strings.NewReader(admissionJSON))
	if err != nil {
		t.Fatal(err)
	}
	stops, order := goodputByLoad(d, 1)
	if want := []string{"b", "a", "c"}; !reflect.DeepEqual(order, want) {
		t.Errorf("order = %v, want %v", order, want)
	}
	if want := [][2]float64{{0.5, 49.5}, {2, 95}}; !reflect.DeepEqual(stops["b"], want) {
		t.Errorf("b = %v, want %v (loads ascending, %% of capacity, the least stalled round's or the median)", stops["b"], want)
	}
	ign, _ := goodputByLoad(d, 2)
	if want := [][2]float64{{2, 0}}; !reflect.DeepEqual(ign["a"], want) || len(ign) != 1 {
		t.Errorf("ignores = %v, want only a at %v", ign, want)
	}
	knee := d.Cells[3]
	k := calmest(knee.Results[0].Rounds)
	if k != 1 {
		t.Fatalf("calmest = %d, want 1 (the round not stalled)", k)
	}
	if got, want := knee.Results[0].Rounds[k].InHandler, []int64{8, 10, 9, 9, 5}; !reflect.DeepEqual(got, want) {
		t.Errorf("InHandler = %v, want %v", got, want)
	}
	if got := knee.Results[0].Rounds[k].Goodput; got != 480 {
		t.Errorf("round goodput = %v, want 480", got)
	}
	if got, want := kneeLine(knee), [][2]float64{{0, 8}, {2, 8}, {2, 4}, {4, 4}}; !reflect.DeepEqual(got, want) {
		t.Errorf("kneeLine = %v, want %v", got, want)
	}
	if got, want := kneeLine(d.Cells[0]), [][2]float64{{0, 0}, {1, 0}}; !reflect.DeepEqual(got, want) {
		t.Errorf("kneeLine without a knee = %v, want %v", got, want)
	}
}

func TestReadAdmissionRejects(t *testing.T) {
	for _, in := range []string{"", "{", `{"Capacity": 800}`, `{"Cells": [{}]}`} {
		if _, err := readAdmission(strings.NewReader(in)); err == nil {
			t.Errorf("readAdmission(%q): no error", in)
		}
	}
}

func TestCalmest(t *testing.T) {
	for _, tc := range []struct {
		sched []time.Duration
		want  int
	}{
		{nil, -1},
		{[]time.Duration{5}, 0},
		{[]time.Duration{5, 3, 3, 9}, 1},
	} {
		var rs []round
		for _, s := range tc.sched {
			rs = append(rs, round{Sched999: s})
		}
		if got := calmest(rs); got != tc.want {
			t.Errorf("calmest(%v) = %d, want %d", tc.sched, got, tc.want)
		}
	}
}

func TestMeans(t *testing.T) {
	for _, tc := range []struct {
		samples []int64
		per     int
		want    [][2]float64
	}{
		{[]int64{8, 10, 9, 9, 5}, 2, [][2]float64{{0.01, 9}, {0.03, 9}}},
		{[]int64{4, 4, 4}, 3, [][2]float64{{0.015, 4}}},
		{[]int64{4}, 2, nil},
		{[]int64{4}, 0, nil},
	} {
		got := means(tc.samples, tc.per)
		if len(got) != len(tc.want) {
			t.Fatalf("means(%v, %d) = %v, want %v", tc.samples, tc.per, got, tc.want)
		}
		for i := range got {
			if d := got[i][0] - tc.want[i][0]; d > 1e-12 || d < -1e-12 || got[i][1] != tc.want[i][1] {
				t.Errorf("means(%v, %d) = %v, want %v", tc.samples, tc.per, got, tc.want)
			}
		}
	}
}
