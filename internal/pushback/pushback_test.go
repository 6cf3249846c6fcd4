package pushback_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

// An Error keeps the call's status and unwraps to its error.
func TestError(t *testing.T) {
	inner := status.Error(codes.DeadlineExceeded, "shortcircuit: 3ms left, floor 20ms")
	err := fmt.Errorf("relayed: %w", &pushback.Error{Err: inner, Value: "-1"})
	if v, ok := pushback.Of(err); !ok || v != "-1" {
		t.Errorf("Of = %q, %v; want -1, true", v, ok)
	}
	if _, ok := pushback.Of(inner); ok {
		t.Error("Of found a pushback on a plain status error")
	}
	e := &pushback.Error{Err: inner, Value: "-1"}
	if st := status.Convert(e); st.Code() != codes.DeadlineExceeded || st.Message() != "shortcircuit: 3ms left, floor 20ms" || e.Error() != inner.Error() || !errors.Is(e, inner) {
		t.Errorf("status %v %q, text %q; want the inner error's", st.Code(), st.Message(), e.Error())
	}
}
