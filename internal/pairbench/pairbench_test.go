package pairbench

import (
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{[]time.Duration{3}, 3},
		{[]time.Duration{5, 1, 3}, 3},
		{[]time.Duration{4, 1, 3, 2}, 3},
	} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v; want %v", tc.in, got, tc.want)
		}
	}
}

func TestQuantile(t *testing.T) {
	ten := []time.Duration{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}
	for _, tc := range []struct {
		in   []time.Duration
		q    float64
		want time.Duration
	}{
		{nil, 0.1, 0},
		{ten, 0.1, 2},
		{ten, 0, 1},
		{ten, 0.99, 10},
		{[]time.Duration{7}, 0.1, 7},
	} {
		if got := quantile(tc.in, tc.q); got != tc.want {
			t.Errorf("quantile(%v, %v) = %v; want %v", tc.in, tc.q, got, tc.want)
		}
	}
}

func BenchmarkSame(b *testing.B) {
	f := func() error { return nil }
	Run(b, f, f)
}
