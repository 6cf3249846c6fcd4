// Package quantile estimates quantiles of durations over a sliding time window, per
// key: the recent median of a handler, the recent P99 of a backend.
//
// A [Window] keeps its samples in a ring of time buckets, each a log-linear histogram
// (16 sub-buckets per power of two, so an estimate is within about 3% of a sample
// actually seen). A sample lives in the window for between Length − Length/Buckets and
// Length after it was added: when the ring moves on, the oldest bucket is dropped
// whole. Adding a sample takes a lock and recomputes the tracked quantile (a walk of
// at most 76 counters); reading the tracked quantile takes no lock; neither allocates
// once a bucket has been used. A window takes about 4 KiB plus 4 KiB per bucket in
// use. [Keyed] gives one Window per key, with a bounded number of keys.
//
// The caller passes the time (now) to every method, normally a reading of time.Now it
// already has; the window keeps the monotonic difference from its creation time, so
// wall-clock steps do not move it. Under testing/synctest the fake clock drives it.
//
// This package imports the standard library only.
package quantile

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Config describes a window. Zero fields take the value of [DefaultConfig].
type Config struct {
	// Length is how long a sample stays in the window.
	Length time.Duration
	// Buckets is the number of time buckets the window is cut into: the window
	// moves on, dropping its oldest samples, every Length/Buckets. At most
	// MaxBuckets; more count as MaxBuckets.
	Buckets int
	// Quantile is the quantile (in (0, 1]) that [Window.Tracked] returns without
	// taking a lock. Any quantile can be asked of [Window.Quantile].
	Quantile float64
	// MaxKeys bounds the number of windows a [Keyed] holds.
	MaxKeys int
}

// MaxBuckets bounds [Config.Buckets], and so the memory of one window (each bucket
// in use takes about 4 KiB).
const MaxBuckets = 1000

// DefaultConfig is a 10 s window in 10 buckets of 1 s, tracking the median, at most
// 1024 keys.
var DefaultConfig = Config{Length: 10 * time.Second, Buckets: 10, Quantile: 0.5, MaxKeys: 1024}

func (c Config) withDefaults() Config {
	if c.Length <= 0 {
		c.Length = DefaultConfig.Length
	}
	if c.Buckets <= 0 {
		c.Buckets = DefaultConfig.Buckets
	}
	c.Buckets = min(c.Buckets, MaxBuckets)
	if c.Quantile <= 0 || math.IsNaN(c.Quantile) {
		c.Quantile = DefaultConfig.Quantile
	}
	c.Quantile = min(c.Quantile, 1)
	if c.MaxKeys <= 0 {
		c.MaxKeys = DefaultConfig.MaxKeys
	}
	return c
}

// Histogram layout: values below 16 have a bin each; above, each power of two is cut
// into 16 bins. Bins are grouped 16 by 16 so that a quantile walk visits at most
// groups + 16 counters.
const (
	subBits  = 4
	subCount = 1 << subBits
	bins     = subCount + (63-subBits)*subCount // 960: up to the largest int64
	groups   = bins / subCount
)

func binOf(v int64) int {
	if v < subCount {
		return int(max(v, 0))
	}
	shift := bits.Len64(uint64(v)) - subBits - 1
	return subCount + shift*subCount + int(v>>shift)&(subCount-1)
}

// valueOf is the value a bin stands for: the middle of its range.
func valueOf(i int) int64 {
	if i < subCount {
		return int64(i)
	}
	shift := (i - subCount) / subCount
	lo := int64(subCount+(i-subCount)%subCount) << shift
	return lo + (int64(1)<<shift)/2
}

type bucket struct {
	n    uint32
	bins [bins]uint32
}

// Window estimates quantiles of the durations added in a sliding time window. Its
// methods are safe for concurrent use. Make one with [New]; the zero Window is not
// usable.
type Window struct {
	width int64 // nanoseconds per bucket
	q     float64
	epoch time.Time

	// The tracked quantile, its sample count, and the time (nanoseconds since epoch)
	// until which they hold, published for lock-free readers.
	tVal, tCount, tUntil atomic.Int64

	mu     sync.Mutex
	head   int64     // number of the newest bucket (time since epoch / width)
	ring   []*bucket // bucket number b lives at ring[b % len(ring)]; nil until used
	count  uint32
	groups [groups]uint32
	total  [bins]uint32
}

// New returns an empty window.
func New(cfg Config) *Window {
	cfg = cfg.withDefaults()
	return &Window{
		width: max(int64(cfg.Length)/int64(cfg.Buckets), 1),
		q:     cfg.Quantile,
		epoch: time.Now(),
		ring:  make([]*bucket, cfg.Buckets),
	}
}

func (w *Window) bucketOf(now time.Time) int64 {
	return max(int64(now.Sub(w.epoch)), 0) / w.width
}

// advance moves the ring to bucket b, dropping the buckets that leave the window.
// A time older than the newest bucket counts in the newest bucket. w.mu is held.
func (w *Window) advance(b int64) {
	if b <= w.head {
		return
	}
	n := int64(len(w.ring))
	if b-w.head >= n {
		for _, bk := range w.ring {
			if bk != nil && bk.n > 0 {
				clear(bk.bins[:])
				bk.n = 0
			}
		}
		clear(w.total[:])
		clear(w.groups[:])
		w.count = 0
	} else {
		for k := w.head + 1; k <= b; k++ {
			bk := w.ring[k%n]
			if bk == nil || bk.n == 0 {
				continue
			}
			for i, c := range bk.bins {
				if c != 0 {
					w.total[i] -= c
					w.groups[i/subCount] -= c
				}
			}
			w.count -= bk.n
			clear(bk.bins[:])
			bk.n = 0
		}
	}
	w.head = b
}

// Epoch is the window's time zero: [Window.AddAt] and [Window.TrackedAt] take times
// as nanoseconds since it, for callers that keep time that way already.
func (w *Window) Epoch() time.Time { return w.epoch }

// Add records duration v (negative values count as zero) at time now.
func (w *Window) Add(now time.Time, v time.Duration) { w.AddAt(int64(now.Sub(w.epoch)), v) }

// AddAt is [Window.Add] at ns nanoseconds since [Window.Epoch].
func (w *Window) AddAt(ns int64, v time.Duration) {
	i := binOf(int64(v))
	w.mu.Lock()
	w.advance(max(ns, 0) / w.width)
	bk := w.ring[w.head%int64(len(w.ring))]
	if bk == nil {
		bk = new(bucket)
		w.ring[w.head%int64(len(w.ring))] = bk
	}
	bk.bins[i]++
	bk.n++
	w.total[i]++
	w.groups[i/subCount]++
	w.count++
	w.publish()
	w.mu.Unlock()
}

// publish computes the tracked quantile for lock-free readers. w.mu is held.
func (w *Window) publish() {
	w.tVal.Store(int64(w.quantile(w.q)))
	w.tCount.Store(int64(w.count))
	w.tUntil.Store((w.head + 1) * w.width)
}

// quantile is the nearest-rank quantile of the samples in the window. w.mu is held.
func (w *Window) quantile(q float64) time.Duration {
	if w.count == 0 {
		return 0
	}
	rank := uint32(min(max(math.Ceil(q*float64(w.count)), 1), float64(w.count)))
	var cum uint32
	for g, c := range w.groups {
		if cum+c < rank {
			cum += c
			continue
		}
		for i := g * subCount; i < (g+1)*subCount; i++ {
			cum += w.total[i]
			if cum >= rank {
				return time.Duration(valueOf(i))
			}
		}
	}
	return time.Duration(valueOf(bins - 1)) // not reached: the counts add up
}

// Quantile returns the q-quantile (q in [0, 1], clamped) of the durations in the
// window at time now, and how many durations it holds. It returns 0, 0 for an empty
// window.
func (w *Window) Quantile(now time.Time, q float64) (v time.Duration, n int) {
	if math.IsNaN(q) {
		q = 0.5
	}
	w.mu.Lock()
	w.advance(w.bucketOf(now))
	v, n = w.quantile(min(max(q, 0), 1)), int(w.count)
	w.mu.Unlock()
	return v, n
}

// Tracked returns the configured quantile ([Config.Quantile]) of the durations in the
// window at time now, and how many durations it holds. It takes no lock except when
// the window has moved on since the last sample; under concurrent Adds the value and
// the count may come from two consecutive samples.
func (w *Window) Tracked(now time.Time) (v time.Duration, n int) {
	return w.TrackedAt(int64(now.Sub(w.epoch)))
}

// TrackedAt is [Window.Tracked] at ns nanoseconds since [Window.Epoch].
func (w *Window) TrackedAt(ns int64) (v time.Duration, n int) {
	if ns < w.tUntil.Load() {
		return time.Duration(w.tVal.Load()), int(w.tCount.Load())
	}
	w.mu.Lock()
	w.advance(max(ns, 0) / w.width)
	w.publish()
	v, n = time.Duration(w.tVal.Load()), int(w.tCount.Load())
	w.mu.Unlock()
	return v, n
}

// Count returns how many durations the window holds at time now.
func (w *Window) Count(now time.Time) int {
	w.mu.Lock()
	w.advance(w.bucketOf(now))
	n := int(w.count)
	w.mu.Unlock()
	return n
}

// Keyed holds one [Window] per key, at most [Config.MaxKeys] of them. Lookups of an
// existing key take no lock and do not allocate. Its methods are safe for concurrent
// use. Make one with [NewKeyed].
type Keyed[K comparable] struct {
	cfg Config
	m   atomic.Pointer[map[K]*Window] // copy-on-write: replaced whole when a key is added
	mu  sync.Mutex                    // serialises additions
}

// NewKeyed returns an empty set of windows, each made with cfg.
func NewKeyed[K comparable](cfg Config) *Keyed[K] {
	return &Keyed[K]{cfg: cfg.withDefaults()}
}

// Window returns the window of key, making it when the key is new. It returns nil
// when the key is new and MaxKeys windows exist already: keys are never evicted, so a
// caller whose keys come from untrusted input should bound them itself.
func (k *Keyed[K]) Window(key K) *Window {
	if m := k.m.Load(); m != nil {
		if w, ok := (*m)[key]; ok {
			return w
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	old := k.m.Load()
	var n int
	if old != nil {
		if w, ok := (*old)[key]; ok {
			return w
		}
		n = len(*old)
	}
	if n >= k.cfg.MaxKeys {
		return nil
	}
	m := make(map[K]*Window, n+1)
	if old != nil {
		for key, w := range *old {
			m[key] = w
		}
	}
	w := New(k.cfg)
	m[key] = w
	k.m.Store(&m)
	return w
}

// Len returns the number of keys.
func (k *Keyed[K]) Len() int {
	if m := k.m.Load(); m != nil {
		return len(*m)
	}
	return 0
}
