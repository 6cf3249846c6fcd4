package keychain_test

import (
	"context"
	"strings"
	"testing"

	"github.com/deadlinekit/deadlinekit/internal/keychain"
)

func TestDerivation(t *testing.T) {
	ctx := context.Background()
	if keychain.From(ctx) != nil {
		t.Fatal("a chain on a bare context")
	}
	run := func(scoped string) []string {
		c := keychain.From(keychain.With(ctx, scoped, "k"))
		return []string{c.Next(), c.Next(), c.Labelled("1"), c.Labelled("2")}
	}
	first, again, other := run("0::k"), run("0::k"), run("5:acme:k")
	seen := map[string]bool{}
	for i, k := range first {
		if k != again[i] {
			t.Fatalf("key %d: %q on one run, %q on the next", i, k, again[i])
		}
		if seen[k] || seen[other[i]] || k == other[i] {
			t.Fatalf("key %d repeats: %q, %q", i, first, other)
		}
		seen[k], seen[other[i]] = true, true
		if !strings.HasPrefix(k, keychain.Prefix) || len(k) > 255 || strings.Contains(k, "acme") {
			t.Fatalf("key %q", k)
		}
		for _, r := range k {
			if r < 0x21 || r > 0x7e || r == '"' || r == ',' || r == '\\' {
				t.Fatalf("key %q: %q is not a bare token's", k, r)
			}
		}
	}
}

func TestForwarded(t *testing.T) {
	c := keychain.From(keychain.With(context.Background(), `0::a"b`, `a"b`))
	for v, want := range map[string]bool{
		`a"b`:      true,
		` a"b	`:    true,
		`"a\"b"`:   true,
		` "a\"b" `: true,
		`"a"b"`:    true, // malformed: replaced rather than sent on to be refused
		`a"b2`:     false,
		`"a\"b2"`:  false,
		``:         false,
		`"`:        false,
		`0::a"b`:   false,
		`"a\\\"b"`: false,
		`dk1.a"b`:  false,
	} {
		if got := c.Forwarded(v); got != want {
			t.Errorf("Forwarded(%q) = %v, want %v", v, got, want)
		}
	}
}

// runCtx answers Key itself, as package dedup's run context does.
type runCtx struct {
	context.Context
	c keychain.Chain
}

func (r *runCtx) Value(key any) any {
	if _, ok := key.(keychain.Key); ok {
		return &r.c
	}
	return r.Context.Value(key)
}

func TestInitIsWith(t *testing.T) {
	rc := &runCtx{Context: context.Background()}
	rc.c.Init("0::k", "k")
	c := keychain.From(keychain.With(context.Background(), "0::k", "k"))
	e := keychain.From(rc)
	if e != &rc.c {
		t.Fatal("From does not find the chain a context answers Key with")
	}
	if a, b := c.Next(), e.Next(); a != b {
		t.Fatalf("Next: %q from With, %q from Init", a, b)
	}
	if a, b := c.Labelled("x"), e.Labelled("x"); a != b {
		t.Fatalf("Labelled: %q from With, %q from Init", a, b)
	}
	if !e.Forwarded("k") || e.Forwarded("0::k") {
		t.Fatal("Init's chain does not know its inbound key")
	}
}
