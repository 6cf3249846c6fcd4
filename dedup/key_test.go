package dedup_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/deadlinekit/deadlinekit/dedup"
)

func TestParseKeyAccepts(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"  abc\t", "abc"},
		{`"with space"`, "with space"},
		{`"a\"b\\c"`, `a"b\c`},
		{strings.Repeat("k", 255), strings.Repeat("k", 255)},
		{`"` + strings.Repeat("k", 255) + `"`, strings.Repeat("k", 255)},
		{`"` + strings.Repeat(`\"`, 255) + `"`, strings.Repeat(`"`, 255)},
		{"x", "x"},
	} {
		got, err := dedup.ParseKey([]string{tc.in})
		if err != nil || got != tc.want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestParseKeyHostile(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []string
		why  string
	}{
		{"no value", nil, "missing"},
		{"empty", []string{""}, "empty"},
		{"blank", []string{"   "}, "empty"},
		{"empty quoted", []string{`""`}, "empty"},
		{"256 characters", []string{strings.Repeat("k", 256)}, "longer than 255"},
		{"256 quoted", []string{`"` + strings.Repeat("k", 256) + `"`}, "longer than 255"},
		{"256 escaped", []string{`"` + strings.Repeat(`\\`, 256) + `"`}, "longer than 255"},
		{"NUL", []string{"ab\x00c"}, "not visible ASCII"},
		{"newline", []string{"ab\nc"}, "not visible ASCII"},
		{"DEL", []string{"ab\x7fc"}, "not visible ASCII"},
		{"tab inside quotes", []string{"\"a\tb\""}, "not printable ASCII"},
		{"space unquoted", []string{"a b"}, "not visible ASCII"},
		{"non-ASCII", []string{"clé"}, `character 'é' (U+00E9) at position 2 is not visible ASCII`},
		{"non-ASCII quoted", []string{`"clé"`}, `character 'é' (U+00E9) at position 3 is not printable ASCII`},
		{"a rune of four bytes", []string{"k🔑"}, `character '🔑' (U+1F511) at position 1`},
		{"not UTF-8", []string{"k\xc3("}, `byte 0xC3 at position 1 (not UTF-8) is not visible ASCII`},
		{"not UTF-8 quoted", []string{"\"k\xff\""}, `byte 0xFF at position 2 (not UTF-8) is not printable ASCII`},
		{"control", []string{"k\x01"}, `character '\x01' (U+0001) at position 1`},
		{"quote inside bare", []string{`a"b`}, "quote"},
		{"opening quote only", []string{`"abc`}, "closing quote"},
		{"closing quote only", []string{`abc"`}, "quote"},
		{"bad escape", []string{`"a\nb"`}, "backslash"},
		{"trailing backslash", []string{`"abc\`}, "backslash"},
		{"after the quote", []string{`"a"b`}, "after the closing quote"},
		{"a list", []string{`"a", "b"`}, "after the closing quote"},
		{"bare list", []string{"a,b"}, "list"},
		{"parameters", []string{`"a";p=1`}, "parameters"},
		{"two values", []string{"a", "b"}, "2 values"},
		{"many values", make([]string, 50), "50 values"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dedup.ParseKey(tc.in)
			if err == nil {
				t.Fatalf("ParseKey(%q) = %q, want an error", tc.in, got)
			}
			if !errors.Is(err, dedup.ErrMalformedKey) {
				t.Errorf("error %v is not ErrMalformedKey", err)
			}
			if !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), "Idempotency-Key") {
				t.Errorf("error %q does not say %q and name the header", err, tc.why)
			}
		})
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, "", `"`, `"\`, "a,b", "\x00", strings.Repeat("k", 256), `"x";a`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		k, err := dedup.ParseKey([]string{in})
		if err != nil {
			if !errors.Is(err, dedup.ErrMalformedKey) {
				t.Fatalf("error %v is not ErrMalformedKey", err)
			}
			if !utf8.ValidString(err.Error()) {
				t.Fatalf("error %q is not UTF-8: it cannot be a message", err)
			}
			return
		}
		if len(k) == 0 || len(k) > dedup.MaxKeyLength {
			t.Fatalf("accepted a key of %d characters", len(k))
		}
		for i := 0; i < len(k); i++ {
			if k[i] < 0x20 || k[i] > 0x7e {
				t.Fatalf("accepted %q with a character outside printable ASCII", k)
			}
		}
		// A key written back as a quoted string reads the same.
		q := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(k) + `"`
		if k2, err := dedup.ParseKey([]string{q}); err != nil || k2 != k {
			t.Fatalf("quoted %q reads %q, %v", q, k2, err)
		}
	})
}
