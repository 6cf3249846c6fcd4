package criticality_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/deadlinekit/deadlinekit/criticality"
)

func TestZeroValueIsCritical(t *testing.T) {
	var l criticality.Level
	if l != criticality.Critical || criticality.From(context.Background()) != criticality.Critical {
		t.Fatalf("zero Level = %v, From(empty) = %v; want critical", l, criticality.From(context.Background()))
	}
}

func TestOrder(t *testing.T) {
	order := []criticality.Level{criticality.Sheddable, criticality.SheddablePlus, criticality.Critical, criticality.CriticalPlus}
	for i := 1; i < len(order); i++ {
		if !(order[i-1] < order[i]) {
			t.Errorf("%v < %v is false", order[i-1], order[i])
		}
	}
}

func TestWithFrom(t *testing.T) {
	ctx := context.Background()
	for _, l := range []criticality.Level{criticality.Sheddable, criticality.SheddablePlus, criticality.Critical, criticality.CriticalPlus} {
		if got := criticality.From(criticality.With(ctx, l)); got != l {
			t.Errorf("From(With(%v)) = %v", l, got)
		}
	}
	// The innermost level wins: a handler may demote its own calls.
	inner := criticality.With(criticality.With(ctx, criticality.CriticalPlus), criticality.Sheddable)
	if got := criticality.From(inner); got != criticality.Sheddable {
		t.Errorf("From(nested) = %v; want sheddable", got)
	}
	// Out of range: clamped to the nearest level.
	if got := criticality.From(criticality.With(ctx, 100)); got != criticality.CriticalPlus {
		t.Errorf("With(100) = %v; want critical_plus", got)
	}
	if got := criticality.From(criticality.With(ctx, -100)); got != criticality.Sheddable {
		t.Errorf("With(-100) = %v; want sheddable", got)
	}
}

func TestString(t *testing.T) {
	for l, want := range map[criticality.Level]string{
		criticality.CriticalPlus: "critical_plus", criticality.Critical: "critical",
		criticality.SheddablePlus: "sheddable_plus", criticality.Sheddable: "sheddable",
		7: "Level(7)", -3: "Level(-3)",
	} {
		if got := l.String(); got != want {
			t.Errorf("Level(%d).String() = %q; want %q", int(l), got, want)
		}
		if l.Valid() != !strings.HasPrefix(want, "Level(") {
			t.Errorf("Level(%d).Valid() = %v", int(l), l.Valid())
		}
	}
}

// hostile is the table of inputs a caller can put in the header: what Parse makes
// of each, a level or the reason it refuses it.
var hostile = []struct {
	name, in string
	want     criticality.Level
	reason   string // "" when it parses
}{
	{"each level", "critical_plus", criticality.CriticalPlus, ""},
	{"critical", "critical", criticality.Critical, ""},
	{"sheddable_plus", "sheddable_plus", criticality.SheddablePlus, ""},
	{"sheddable", "sheddable", criticality.Sheddable, ""},
	{"upper case (the SRE book's enum)", "CRITICAL_PLUS", criticality.CriticalPlus, ""},
	{"mixed case", "Sheddable_Plus", criticality.SheddablePlus, ""},
	{"spaces and tabs around", " \tsheddable \t", criticality.Sheddable, ""},

	{"empty", "", 0, "empty value"},
	{"only spaces", "   \t ", 0, "empty value"},
	{"hyphen for underscore", "critical-plus", 0, "unknown level"},
	{"no separator", "criticalplus", 0, "unknown level"},
	{"space inside", "critical plus", 0, "unknown level"},
	{"prefix of a level", "critical_", 0, "unknown level"},
	{"level with a suffix", "sheddablex", 0, "unknown level"},
	{"number", "1", 0, "unknown level"},
	{"negative number", "-2", 0, "unknown level"},
	{"enum number of the SRE proto", "3", 0, "unknown level"},
	{"two values joined", "critical, sheddable", 0, "a list of values"},
	{"the same value joined", "critical_plus,critical_plus", 0, "a list of values"},
	{"two lines (LF)", "critical\nsheddable", 0, "control character"},
	{"CR LF then a header", "sheddable\r\nX-Evil: 1", 0, "control character"},
	{"trailing CR", "critical\r", 0, "control character"},
	{"NUL", "critical\x00", 0, "control character"},
	{"DEL", "critical\x7f", 0, "control character"},
	{"Unicode long s folds to s", "ſheddable", 0, "non-ASCII character"},
	{"Kelvin sign folds to k", "critical_plus\u212a", 0, "non-ASCII character"},
	{"full-width letters", "ｃｒｉｔｉｃａｌ", 0, "non-ASCII character"},
	{"non-breaking space around", "\u00a0critical\u00a0", 0, "non-ASCII character"},
	{"invalid UTF-8", "critical\xff", 0, "non-ASCII character"},
	{"quoted", `"critical"`, 0, "unknown level"},
	{"long", strings.Repeat("critical", 1<<17), 0, "too long"},
	{"long of spaces then a level", strings.Repeat(" ", 1<<16) + "critical", criticality.Critical, ""},
}

func TestParseHostile(t *testing.T) {
	for _, c := range hostile {
		t.Run(c.name, func(t *testing.T) {
			got, err := criticality.Parse(c.in)
			if c.reason == "" {
				if err != nil || got != c.want {
					t.Fatalf("Parse = %v, %v; want %v", got, err, c.want)
				}
				return
			}
			var pe *criticality.ParseError
			if !errors.As(err, &pe) || !errors.Is(err, criticality.ErrMalformed) {
				t.Fatalf("Parse = %v, %v; want a *ParseError matching ErrMalformed", got, err)
			}
			if got != criticality.Critical {
				t.Errorf("Parse refused it but returned %v; want critical", got)
			}
			if pe.Header != criticality.Header || !strings.HasPrefix(pe.Reason, c.reason) {
				t.Errorf("error %+v; want header %s, reason %q…", pe, criticality.Header, c.reason)
			}
			if len(pe.Value) > 32+len("…") {
				t.Errorf("the error holds %d bytes of the value; want at most 32", len(pe.Value))
			}
			if msg := err.Error(); !strings.Contains(msg, criticality.Header) || len(msg) > 200 {
				t.Errorf("message %q: want the header named, and short", msg)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, c := range hostile {
		f.Add(c.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := criticality.Parse(s)
		if err != nil {
			if !errors.Is(err, criticality.ErrMalformed) || l != criticality.Critical {
				t.Fatalf("Parse(%q) = %v, %v", s, l, err)
			}
			return
		}
		if !l.Valid() {
			t.Fatalf("Parse(%q) = invalid level %d", s, int(l))
		}
		// What parses is a level's name, up to ASCII case and the spaces around it.
		if got := strings.ToLower(strings.Trim(s, " \t")); got != l.String() {
			t.Fatalf("Parse(%q) = %v, but the value is %q", s, l, got)
		}
		if back, err := criticality.Parse(l.String()); err != nil || back != l {
			t.Fatalf("round trip of %v: %v, %v", l, back, err)
		}
	})
}
