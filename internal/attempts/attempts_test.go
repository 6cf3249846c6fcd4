package attempts_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/deadlinekit/deadlinekit/internal/attempts"
)

// parseCases are hostile grpc-previous-rpc-attempts values and what every layer reads
// in them. The cases where retry's old parser and hedge's disagreed are marked.
var parseCases = []struct {
	v    string
	want int
}{
	{"", 0},
	{"0", 0},
	{"1", 1},
	{"2", 2},
	{"007", 7},
	{" 3 ", 3},   // retry trimmed, hedge read 0: trimmed
	{"\t3\t", 3}, // HTTP's optional white space is spaces and tabs
	{"3 \t ", 3},
	{"   ", 0},
	{"+1", 1}, // strconv.Atoi takes the sign; both parsers did
	{"+", 0},
	{"++1", 0},
	{"+ 1", 0},
	{"-1", 0},
	{"-0", 0},
	{"-9223372036854775808", 0},
	{"999", 999},
	{"1000", attempts.Max},
	{"1001", attempts.Max},                // retry: a retry; hedge: 0; now the cap
	{"9223372036854775807", attempts.Max}, // MaxInt64: a retry, at the cap
	{"9223372036854775808", 0},            // past 64 bits: unreadable
	{"99999999999999999999", 0},
	{"00000000000000000000000000001", 1}, // leading zeros never overflow
	{strings.Repeat("9", 1<<20), 0},
	{strings.Repeat("0", 1<<20) + "5", 5},
	{"0x1", 0},
	{"1e3", 0},
	{"1.0", 0},
	{"1_000", 0},
	{"1, 2", 0},
	{"1,2", 0},
	{"１", 0}, // full-width digit
	{"١", 0}, // Arabic-Indic digit
	{"1\x00", 0},
	{"\x001", 0},
	{"1\r\n", 0},
	{"\u00a01", 0}, // no-break space is not optional white space
	{"many", 0},
	{"1 2", 0},
}

func TestParse(t *testing.T) {
	for _, tc := range parseCases {
		if got := attempts.Parse(tc.v); got != tc.want {
			t.Errorf("Parse(%.40q) = %d; want %d", tc.v, got, tc.want)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{
		{-5, "0"}, {0, "0"}, {1, "1"}, {42, "42"}, {attempts.Max, "1000"}, {attempts.Max + 1, "1000"},
		{1<<63 - 1, "1000"}, {-1 << 63, "0"},
	} {
		if got := attempts.Format(tc.n); got != tc.want {
			t.Errorf("Format(%d) = %q; want %q", tc.n, got, tc.want)
		}
		if got := attempts.Parse(attempts.Format(tc.n)); got != min(max(tc.n, 0), attempts.Max) {
			t.Errorf("Parse(Format(%d)) = %d", tc.n, got)
		}
	}
}

// A huge value costs no allocation: Parse is on every inbound request.
func TestParseAllocs(t *testing.T) {
	long := strings.Repeat("9", 1<<20)
	var sink int
	if n := testing.AllocsPerRun(10, func() { sink += attempts.Parse(long) }); n != 0 {
		t.Errorf("Parse of 1 MiB allocates %v times", n)
	}
	_ = sink
}

// reference is the rule written with strconv: trim spaces and tabs, a decimal that
// fits in 64 bits, negative or unreadable is 0, capped at Max.
func reference(v string) int {
	n, err := strconv.ParseInt(strings.Trim(v, " \t"), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return int(min(n, attempts.Max))
}

func FuzzParse(f *testing.F) {
	for _, tc := range parseCases {
		if len(tc.v) < 64 {
			f.Add(tc.v)
		}
	}
	f.Fuzz(func(t *testing.T, v string) {
		n := attempts.Parse(v)
		if n < 0 || n > attempts.Max {
			t.Fatalf("Parse(%q) = %d, out of [0, %d]", v, n, attempts.Max)
		}
		if want := reference(v); n != want {
			t.Fatalf("Parse(%q) = %d; the rule says %d", v, n, want)
		}
		if got := attempts.Parse(attempts.Format(n)); got != n {
			t.Fatalf("Parse(Format(%d)) = %d", n, got)
		}
	})
}

// Which inbound requests the chain rule covers, hostile values included: a mark
// other than "0" covers (it can only cost its sender hedges), no mark falls back on
// the attempt count.
func TestCovers(t *testing.T) {
	for _, c := range []struct {
		mark, prev string
		want       bool
	}{
		{"", "", false},
		{"1", "", true},
		{"0", "", false},
		{"0", "3", false}, // the last copy of a hedge: not covered, whatever it counts
		{"", "1", true},   // a retry's copy
		{"", "0", false},
		{"", "x", false},
		{"yes", "", true},
		{" 0", "", true}, // not exactly the last copy's value
		{"1", "0", true},
	} {
		if got := attempts.Covers(c.mark, c.prev); got != c.want {
			t.Errorf("Covers(%q, %q) = %v; want %v", c.mark, c.prev, got, c.want)
		}
	}
	ctx := context.Background()
	if attempts.Covered(ctx) || !attempts.Covered(attempts.WithCovered(ctx)) {
		t.Error("Covered(ctx) = true without WithCovered, or false with it")
	}
}
