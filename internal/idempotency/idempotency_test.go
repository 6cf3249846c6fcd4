package idempotency

import (
	"fmt"
	"sync"
	"testing"

	"github.com/deadlinekit/deadlinekit/internal/idempotency/idempotencytest"
)

// register registers service pkg.Store (see idempotencytest.Register).
func register(t testing.TB, pkg string) {
	t.Helper()
	if err := idempotencytest.Register(pkg); err != nil {
		t.Fatal(err)
	}
}

var (
	registerOnce sync.Once
	late         int
)

func TestMethod(t *testing.T) {
	for _, tc := range []struct {
		m    string
		want bool
	}{
		{"", true}, {"GET", true}, {"HEAD", true}, {"OPTIONS", true}, {"TRACE", true}, {"PUT", true}, {"DELETE", true},
		{"POST", false}, {"PATCH", false}, {"CONNECT", false}, {"QUERY", false},
		{"get", false}, {"GET ", false}, {" GET", false}, {"GET\x00", false}, {"DELETE/", false},
	} {
		if got := Method(tc.m); got != tc.want {
			t.Errorf("Method(%q) = %v; want %v", tc.m, got, tc.want)
		}
	}
}

func TestKeyed(t *testing.T) {
	for _, tc := range []struct {
		vs   []string
		want bool
	}{
		{nil, false},
		{[]string{}, false},
		{[]string{""}, false},
		{[]string{"   "}, false},
		{[]string{"\t"}, false},
		{[]string{"k1"}, true},
		{[]string{" k1 "}, true},
		{[]string{"k1", ""}, true},
		{[]string{"", "k2"}, false}, // the first value is the key a server reads
		{[]string{"a\x00b"}, true},
		{[]string{"ключ-🔑"}, true},
	} {
		if got := Keyed(tc.vs); got != tc.want {
			t.Errorf("Keyed(%q) = %v; want %v", tc.vs, got, tc.want)
		}
	}
}

func TestDeclared(t *testing.T) {
	registerOnce.Do(func() { register(t, "deadlinekit.idemtest") })
	for _, tc := range []struct {
		method string
		want   bool
	}{
		{"/deadlinekit.idemtest.Store/Get", true},
		{"/deadlinekit.idemtest.Store/Put", true},
		{"deadlinekit.idemtest.Store/Get", true}, // the leading slash is optional
		{"/deadlinekit.idemtest.Store/Post", false},
		{"/deadlinekit.idemtest.Store/Patch", false},
		{"/deadlinekit.idemtest.Store/Missing", false},
		{"/deadlinekit.idemtest.Msg/Get", false}, // a message, not a service
		{"/deadlinekit.idemtest/Store", false},
		{"/deadlinekit.idemtest.Store.Get", false},
		{"", false}, {"/", false}, {"//", false}, {"no-slash", false}, {"/a b/c", false}, {"/.x/y", false},
	} {
		for range 2 { // asked, then remembered
			if got := Declared(tc.method); got != tc.want {
				t.Errorf("Declared(%q) = %v; want %v", tc.method, got, tc.want)
			}
		}
	}
}

// A "no" is not remembered past the registration of the file that declares the
// method: a registry filled late (a test, a plugin) is seen.
func TestDeclaredSeesLateRegistration(t *testing.T) {
	late++ // a package of its own for each run (-count)
	pkg := fmt.Sprintf("deadlinekit.idemlate%d", late)
	m := "/" + pkg + ".Store/Get"
	if Declared(m) {
		t.Fatal("declared before its file was registered")
	}
	register(t, pkg)
	if !Declared(m) {
		t.Fatal("not declared after its file was registered")
	}
	if Declared("/" + pkg + ".Store/Post") {
		t.Fatal("Post declared")
	}
}

// Invented method names do not grow the cache past MaxMethods, and are still
// answered right.
func TestDeclaredCacheBounded(t *testing.T) {
	registerOnce.Do(func() { register(t, "deadlinekit.idemtest") })
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range MaxMethods {
				if Declared(fmt.Sprintf("/evil%d.S/M%d", g, i)) {
					t.Error("an invented method is declared")
					return
				}
			}
		})
	}
	wg.Wait()
	n := 0
	cache.m.Range(func(any, any) bool { n++; return true })
	if n > MaxMethods || cache.n.Load() != int64(n) {
		t.Errorf("%d methods remembered, count %d; want at most %d, and the count right", n, cache.n.Load(), MaxMethods)
	}
	if !Declared("/deadlinekit.idemtest.Store/Put") {
		t.Error("a declared method is not, once the cache is full")
	}
}

func BenchmarkDeclared(b *testing.B) {
	registerOnce.Do(func() { register(b, "deadlinekit.idemtest") })
	for _, m := range []string{"/deadlinekit.idemtest.Store/Get", "/deadlinekit.idemtest.Store/Post"} {
		b.Run(m[len("/deadlinekit.idemtest.Store/"):], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Declared(m)
			}
		})
	}
}
