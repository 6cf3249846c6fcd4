package quantile

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestBins(t *testing.T) {
	if got := binOf(math.MaxInt64); got != bins-1 {
		t.Fatalf("binOf(MaxInt64) = %d; want %d", got, bins-1)
	}
	if binOf(-5) != 0 {
		t.Fatal("a negative value is not in bin 0")
	}
	prev := 0
	check := func(v int64) {
		i := binOf(v)
		if i < prev {
			t.Fatalf("binOf(%d) = %d after %d: bins are not monotonic", v, i, prev)
		}
		prev = i
		got := valueOf(i)
		if err := math.Abs(float64(got-v)) / float64(max(v, 1)); err > 1.0/32 {
			t.Fatalf("value %d → bin %d → %d: relative error %.4f > 1/32", v, i, got, err)
		}
		if binOf(got) != i {
			t.Fatalf("valueOf(%d) = %d is not in bin %d", i, got, i)
		}
	}
	for v := int64(0); v < 100000; v++ {
		check(v)
	}
	for v := int64(100000); v > 0 && v < math.MaxInt64/2; v = v*9/8 + 7 {
		check(v)
	}
}

// exact is the nearest-rank quantile of sorted samples.
func exact(sorted []time.Duration, q float64) time.Duration {
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func TestQuantileAccuracy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 11))
		w := New(Config{})
		var all []time.Duration
		for range 5000 {
			// Log-normal around 20 ms, with a tail.
			d := time.Duration(float64(20*time.Millisecond) * math.Exp(rng.NormFloat64()))
			all = append(all, d)
			w.Add(time.Now(), d)
		}
		slices.Sort(all)
		for _, q := range []float64{0, 0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 1} {
			got, n := w.Quantile(time.Now(), q)
			want := exact(all, q)
			if n != len(all) {
				t.Fatalf("count %d; want %d", n, len(all))
			}
			if err := math.Abs(float64(got-want)) / float64(want); err > 1.0/32 {
				t.Errorf("q%.3f = %v; exact %v (error %.2f%%)", q, got, want, err*100)
			}
		}
		if v, n := w.Tracked(time.Now()); n != len(all) || v != mustQ(w, 0.5) {
			t.Errorf("Tracked = %v, %d; want the median %v, %d", v, n, mustQ(w, 0.5), len(all))
		}
	})
}

// near reports whether got is within the histogram's resolution (1/32) of want.
func near(got, want time.Duration) bool {
	return math.Abs(float64(got-want)) <= float64(want)/32
}

func mustQ(w *Window, q float64) time.Duration {
	v, _ := w.Quantile(time.Now(), q)
	return v
}

func TestEmpty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New(Config{})
		if v, n := w.Quantile(time.Now(), 0.5); v != 0 || n != 0 {
			t.Fatalf("empty Quantile = %v, %d", v, n)
		}
		if v, n := w.Tracked(time.Now()); v != 0 || n != 0 {
			t.Fatalf("empty Tracked = %v, %d", v, n)
		}
		w.Add(time.Now(), -time.Second)
		if v, n := w.Quantile(time.Now(), math.NaN()); v != 0 || n != 1 {
			t.Fatalf("negative sample: Quantile = %v, %d; want 0, 1", v, n)
		}
	})
}

// TestSlide checks that samples leave the window whole bucket by bucket, and that the
// lock-free tracked value follows without any new sample.
func TestSlide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New(Config{Length: 10 * time.Second, Buckets: 10})
		for range 100 {
			w.Add(time.Now(), 10*time.Millisecond)
		}
		time.Sleep(5 * time.Second)
		for range 101 {
			w.Add(time.Now(), 30*time.Millisecond)
		}
		if v, n := w.Tracked(time.Now()); n != 201 || !near(v, 30*time.Millisecond) {
			t.Fatalf("at 5s Tracked = %v, %d; want 30ms, 201", v, n)
		}
		if v, _ := w.Quantile(time.Now(), 0.25); !near(v, 10*time.Millisecond) {
			t.Fatalf("at 5s q0.25 = %v; want 10ms", v)
		}
		time.Sleep(4*time.Second + 999*time.Millisecond) // 9.999s: first bucket still in
		if n := w.Count(time.Now()); n != 201 {
			t.Fatalf("at 9.999s count %d; want 201", n)
		}
		time.Sleep(time.Millisecond) // 10s: the first bucket leaves
		if v, n := w.Tracked(time.Now()); n != 101 || !near(v, 30*time.Millisecond) {
			t.Fatalf("at 10s Tracked = %v, %d; want 30ms, 101", v, n)
		}
		time.Sleep(5 * time.Second)
		if v, n := w.Tracked(time.Now()); n != 0 || v != 0 {
			t.Fatalf("at 15s Tracked = %v, %d; want 0, 0", v, n)
		}
		// A long idle gap clears everything at once.
		w.Add(time.Now(), time.Second)
		time.Sleep(time.Hour)
		if n := w.Count(time.Now()); n != 0 {
			t.Fatalf("after an hour count %d; want 0", n)
		}
		// A time before the newest bucket counts in the newest bucket.
		old := time.Now().Add(-3 * time.Second)
		w.Add(old, 5*time.Millisecond)
		if v, n := w.Quantile(time.Now(), 0.5); n != 1 || !near(v, 5*time.Millisecond) {
			t.Fatalf("late sample: %v, %d", v, n)
		}
	})
}

func TestTrackedQuantile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New(Config{Quantile: 0.99})
		for i := range 1000 {
			w.Add(time.Now(), time.Duration(i+1)*time.Millisecond)
		}
		if v, _ := w.Tracked(time.Now()); v < 960*time.Millisecond || v > 1020*time.Millisecond {
			t.Fatalf("P99 of 1..1000ms = %v", v)
		}
	})
}

func TestKeyed(t *testing.T) {
	k := NewKeyed[string](Config{MaxKeys: 3})
	a := k.Window("a")
	if a == nil || k.Window("a") != a {
		t.Fatal("Window does not return the same window for the same key")
	}
	k.Window("b")
	k.Window("c")
	if w := k.Window("d"); w != nil {
		t.Fatal("a fourth key got a window beyond MaxKeys 3")
	}
	if k.Window("b") == nil || k.Len() != 3 {
		t.Fatalf("existing key lost, or Len %d != 3", k.Len())
	}
	if NewKeyed[int](Config{}).Len() != 0 {
		t.Fatal("new Keyed not empty")
	}
}

// TestConcurrent is for the race detector: adds, reads and new keys at once.
func TestConcurrent(t *testing.T) {
	k := NewKeyed[int](Config{Length: 10 * time.Millisecond, Buckets: 2, MaxKeys: 8})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				w := k.Window((g + i) % 10)
				if w == nil {
					continue
				}
				w.Add(time.Now(), time.Duration(i)*time.Microsecond)
				if v, n := w.Tracked(time.Now()); n < 0 || v < 0 {
					t.Errorf("Tracked = %v, %d", v, n)
				}
				w.Quantile(time.Now(), 0.9)
			}
		})
	}
	wg.Wait()
	if k.Len() != 8 {
		t.Fatalf("Len %d; want 8", k.Len())
	}
}

func TestAllocs(t *testing.T) {
	k := NewKeyed[string](Config{})
	w := k.Window("route")
	now := time.Now()
	w.Add(now, time.Millisecond) // first use of the bucket allocates it
	if n := testing.AllocsPerRun(100, func() {
		w := k.Window("route")
		w.Add(now, time.Millisecond)
		w.Tracked(now)
	}); n != 0 {
		t.Fatalf("%v allocs per lookup + Add + Tracked; want 0", n)
	}
}

func BenchmarkAdd(b *testing.B) {
	w := New(Config{})
	b.ReportAllocs()
	for b.Loop() {
		w.Add(time.Now(), 20*time.Millisecond)
	}
}

func BenchmarkTracked(b *testing.B) {
	w := New(Config{})
	for i := range 1000 {
		w.Add(time.Now(), time.Duration(i)*time.Millisecond)
	}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		w.Tracked(now)
	}
}

func BenchmarkKeyedWindow(b *testing.B) {
	k := NewKeyed[string](Config{})
	for _, r := range []string{"/a", "/b", "/c", "/pkg.Service/Method"} {
		k.Window(r)
	}
	b.ReportAllocs()
	for b.Loop() {
		k.Window("/pkg.Service/Method")
	}
}

func TestConfigBounds(t *testing.T) {
	w := New(Config{Buckets: 1 << 40, Length: time.Nanosecond, Quantile: 7})
	if len(w.ring) != MaxBuckets || w.width != 1 || w.q != 1 {
		t.Fatalf("ring %d, width %d, q %v; want %d, 1, 1", len(w.ring), w.width, w.q, MaxBuckets)
	}
	w.Add(time.Now(), time.Second)
	if v, n := w.Quantile(time.Now().Add(-time.Hour), 0.5); n != 1 || !near(v, time.Second) {
		t.Fatalf("a time before the window's creation: %v, %d", v, n)
	}
}
