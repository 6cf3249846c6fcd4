package deadlinevet

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseDirective(t *testing.T) {
	for _, tc := range []struct {
		text   string
		reason string
		ok     bool
		err    string
	}{
		{text: "//deadlinevet:detached the audit outlives the request", reason: "the audit outlives the request", ok: true},
		{text: "//deadlinevet:detached\tshared cache fill  ", reason: "shared cache fill", ok: true},
		{text: "// an ordinary comment"},
		{text: "//go:generate stringer"},
		{text: "/* block */"},
		{text: "//nolint:contextcheck"},
		{text: "//deadlinevet:detached", ok: true, err: "needs a reason"},
		{text: "//deadlinevet:detached    ", ok: true, err: "needs a reason"},
		{text: "//deadlinevet:", ok: true, err: "unknown directive"},
		{text: "//deadlinevet:detach why", ok: true, err: "unknown directive //deadlinevet:detach:"},
		{text: "//deadlinevet:DETACHED why", ok: true, err: "unknown directive"},
		{text: "// deadlinevet:detached why", ok: true, err: "no space after the slashes"},
		{text: "//\tdeadlinevet:detached why", ok: true, err: "no space after the slashes"},
		{text: "/* deadlinevet:detached why */", ok: true, err: "line comment"},
		{text: "//deadlinevet:detached why\x00", ok: true, err: "unprintable U+0000"},
		{text: "//deadlinevet:detached \xff\xfe", ok: true, err: "not valid UTF-8"},
		{text: "//deadlinevet:" + strings.Repeat("x", 1000), ok: true, err: "xxxxxxxx…"},
		{text: ""},
		{text: "/"},
	} {
		reason, ok, err := parseDirective(tc.text)
		if ok != tc.ok || reason != tc.reason {
			t.Errorf("parseDirective(%q) = %q, %v; want %q, %v", tc.text, reason, ok, tc.reason, tc.ok)
		}
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("parseDirective(%q): unexpected error %v", tc.text, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("parseDirective(%q) error = %v, want one saying %q", tc.text, err, tc.err)
		}
		if err != nil && len(err.Error()) > 200 {
			t.Errorf("parseDirective(%q): an error of %d bytes", tc.text, len(err.Error()))
		}
	}
}

func FuzzParseDirective(f *testing.F) {
	for _, s := range []string{
		"//deadlinevet:detached why", "// deadlinevet:detached why", "//deadlinevet:", "/*deadlinevet:detached*/",
		"//deadlinevet:detached\t\x00", "//deadlinevet:detached \xff", "//x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		reason, ok, err := parseDirective(text)
		if !ok {
			if err != nil || reason != "" {
				t.Fatalf("parseDirective(%q): not a directive, yet %q, %v", text, reason, err)
			}
			return
		}
		if err != nil {
			if reason != "" {
				t.Fatalf("parseDirective(%q): an error and a reason", text)
			}
			if !utf8.ValidString(err.Error()) || len(err.Error()) > 200 {
				t.Fatalf("parseDirective(%q): error %q is not a short valid message", text, err)
			}
			return
		}
		if reason == "" || reason != strings.TrimSpace(reason) {
			t.Fatalf("parseDirective(%q): reason %q", text, reason)
		}
		// A valid directive reads back the same.
		again, ok, err := parseDirective("//deadlinevet:detached " + reason)
		if !ok || err != nil || again != reason {
			t.Fatalf("reason %q does not read back: %q, %v, %v", reason, again, ok, err)
		}
	})
}
