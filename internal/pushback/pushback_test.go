package pushback_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

var refusesCases = []struct {
	v    string
	want bool
}{
	{pushback.DoNotRetry, true},
	{"-1", true},
	{"-0", true}, // a sign: the server means "do not retry", whatever the digits
	{"-9223372036854775809", true},
	{" -1 ", true},
	{"\t-5\n", true},
	{"-" + strings.Repeat("9", 1<<16), true},
	{"", false},
	{"-", false},
	{"--1", false},
	{"- 1", false},
	{"-1ms", false},
	{"-0x1", false},
	{"-１", false},
	{"-1.5", false},
	{"0", false},
	{"250", false},
	{"+1", false},
	{"garbage", false},
}

func TestRefuses(t *testing.T) {
	for _, tc := range refusesCases {
		if got := pushback.Refuses(tc.v); got != tc.want {
			t.Errorf("Refuses(%.40q) = %v; want %v", tc.v, got, tc.want)
		}
	}
}

func FuzzRefuses(f *testing.F) {
	for _, v := range []string{"-1", " -1 ", "-0", "-", "--1", "- 1", "-1ms", "250", "+1", ""} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got := pushback.Refuses(v)
		s := strings.TrimSpace(v)
		digits := len(s) > 1 && s[0] == '-' && strings.Trim(s[1:], "0123456789") == ""
		if got != digits {
			t.Fatalf("Refuses(%q) = %v; want %v", v, got, digits)
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && s[0] != '+' && got != (n < 0 || s[0] == '-') {
			t.Fatalf("Refuses(%q) = %v, but it reads as %d", v, got, n)
		}
	})
}
