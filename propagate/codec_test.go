package propagate_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit/propagate"
)

func TestEncodeGRPCTimeout(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0n"},
		{0, "0n"},
		{1, "1n"},
		{99999999, "99999999n"},
		{100000000, "100000u"}, // 100 ms no longer fits in 8 digits of ns
		{100000999, "100000u"}, // rounded down, never up
		{250 * time.Millisecond, "250000u"},
		{99999999 * time.Microsecond, "99999999u"},
		{100 * time.Second, "100000m"},
		{99999999*time.Millisecond + 999*time.Microsecond, "99999999m"},
		{100000 * time.Second, "100000S"},
		{99999999*time.Second + time.Second/2, "99999999S"},
		{100000000 * time.Second, "1666666M"},
		{time.Duration(math.MaxInt64), "2562047H"},
	} {
		if got := propagate.EncodeGRPCTimeout(tc.d); got != tc.want {
			t.Errorf("EncodeGRPCTimeout(%d) = %q; want %q", tc.d, got, tc.want)
		}
	}
}

func TestDecodeGRPCTimeout(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want time.Duration
	}{
		{"0n", 0},
		{"1n", 1},
		{"250m", 250 * time.Millisecond},
		{"00000001S", time.Second},
		{"99999999n", 99999999},
		{"3u", 3 * time.Microsecond},
		{"2M", 2 * time.Minute},
		{"1H", time.Hour},
		{"2562047H", 2562047 * time.Hour},
		{"2562048H", time.Duration(math.MaxInt64)}, // saturates
		{"99999999H", time.Duration(math.MaxInt64)},
		{"99999999M", 99999999 * time.Minute},
		{"99999999S", 99999999 * time.Second},
	} {
		got, err := propagate.DecodeGRPCTimeout(tc.s)
		if err != nil || got != tc.want {
			t.Errorf("DecodeGRPCTimeout(%q) = %v, %v; want %v", tc.s, got, err, tc.want)
		}
	}
}

// hostileGRPCTimeouts are inputs a caller may send to break a server: each must be
// refused with an error naming the problem, and none may panic.
var hostileGRPCTimeouts = []struct {
	s, reason string
}{
	{"", "empty value"},
	{"m", "no digits"},
	{"S", "no digits"},
	{"100", "missing unit"},
	{"1", "missing unit"},
	{"123456789n", "more than 8 digits"},
	{"000000001n", "more than 8 digits"},
	{"99999999999999999999H", "more than 8 digits"},
	{"-1m", "sign not allowed"},
	{"+1m", "sign not allowed"},
	{"1-m", "sign not allowed"},
	{" 1m", "space not allowed"},
	{"1 m", "space not allowed"},
	{"1m ", "unknown unit"},
	{"\t1m", "space not allowed"},
	{"1x", "unknown unit"},
	{"1s", "unknown unit"}, // seconds are upper-case S
	{"1h", "unknown unit"},
	{"1ms", "unknown unit"},
	{"1.5S", "not a digit"},
	{"1e3m", "not a digit"},
	{"0x10m", "not a digit"},
	{"１m", "non-ASCII"},         // full-width digit one
	{"١٢m", "non-ASCII"},        // Arabic-Indic digits
	{"1\u00b5", "unknown unit"}, // micro sign as unit
	{"5\x00m", "not a digit"},   // NUL inside
	{"5m\x00", "unknown unit"},  // NUL as unit
	{"\xff\xfem", "non-ASCII"},  // invalid UTF-8
	{"1mm", "not a digit"},      // two units
	{"NaNm", "not a digit"},
	{strings.Repeat("9", 1<<20) + "m", "more than 8 digits"}, // 1 MiB value
}

func TestDecodeGRPCTimeoutHostile(t *testing.T) {
	for _, tc := range hostileGRPCTimeouts {
		d, err := propagate.DecodeGRPCTimeout(tc.s)
		if err == nil {
			t.Errorf("DecodeGRPCTimeout(%.20q) = %v, nil; want an error (%s)", tc.s, d, tc.reason)
			continue
		}
		var te *propagate.TimeoutError
		if !errors.As(err, &te) || !errors.Is(err, propagate.ErrMalformedTimeout) {
			t.Errorf("DecodeGRPCTimeout(%.20q) error %T does not match ErrMalformedTimeout", tc.s, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.reason) || !strings.Contains(err.Error(), "Grpc-Timeout") {
			t.Errorf("DecodeGRPCTimeout(%.20q) error %q; want it to name the header and say %q", tc.s, err, tc.reason)
		}
		if len(te.Value) > 40 {
			t.Errorf("error keeps %d bytes of the value; want it shortened", len(te.Value))
		}
	}
}

func TestConnectAndEnvoyTimeouts(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-1, "0"}, {0, "0"}, {999 * time.Microsecond, "0"}, {time.Millisecond, "1"},
		{1999 * time.Microsecond, "1"}, {250 * time.Millisecond, "250"},
		{9999999999 * time.Millisecond, "9999999999"}, {time.Duration(math.MaxInt64), "9999999999"},
	} {
		if got := propagate.EncodeConnectTimeout(tc.d); got != tc.want {
			t.Errorf("EncodeConnectTimeout(%v) = %q; want %q", tc.d, got, tc.want)
		}
	}
	decoders := map[string]func(string) (time.Duration, error){
		"Connect-Timeout-Ms":             propagate.DecodeConnectTimeout,
		"X-Envoy-Expected-Rq-Timeout-Ms": propagate.DecodeEnvoyTimeout,
	}
	for header, decode := range decoders {
		for s, want := range map[string]time.Duration{"0": 0, "250": 250 * time.Millisecond, "9999999999": 9999999999 * time.Millisecond, "0000000001": time.Millisecond} {
			if got, err := decode(s); err != nil || got != want {
				t.Errorf("%s %q = %v, %v; want %v", header, s, got, err, want)
			}
		}
		for _, tc := range []struct{ s, reason string }{
			{"", "empty value"}, {"12345678901", "more than 10 digits"}, {"-5", "sign"}, {"+5", "sign"},
			{" 5", "space"}, {"5 ", "space"}, {"5ms", "not a digit"}, {"2.5", "not a digit"},
			{"١", "non-ASCII"}, {"0x1f", "not a digit"}, {strings.Repeat("1", 1<<20), "more than 10 digits"},
		} {
			_, err := decode(tc.s)
			if !errors.Is(err, propagate.ErrMalformedTimeout) || !strings.Contains(err.Error(), tc.reason) || !strings.Contains(err.Error(), header) {
				t.Errorf("%s %.20q: error %v; want one naming the header and saying %q", header, tc.s, err, tc.reason)
			}
		}
	}
}

func FuzzDecodeGRPCTimeout(f *testing.F) {
	for _, s := range []string{"1n", "250m", "99999999H", "0n", "2562048H"} {
		f.Add(s)
	}
	for _, tc := range hostileGRPCTimeouts[:len(hostileGRPCTimeouts)-1] {
		f.Add(tc.s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := propagate.DecodeGRPCTimeout(s)
		if err != nil {
			if d != 0 || !errors.Is(err, propagate.ErrMalformedTimeout) {
				t.Fatalf("DecodeGRPCTimeout(%q) = %v, %v", s, d, err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("DecodeGRPCTimeout(%q) = %v: negative", s, d)
		}
		if len(s) < 2 || len(s) > 9 {
			t.Fatalf("DecodeGRPCTimeout(%q) accepted a value of length %d", s, len(s))
		}
		// What we accept, we can say again: re-encoding never grows the budget.
		d2, err := propagate.DecodeGRPCTimeout(propagate.EncodeGRPCTimeout(d))
		if err != nil || d2 > d {
			t.Fatalf("round trip of %q: %v -> %v, %v", s, d, d2, err)
		}
	})
}

func FuzzEncodeGRPCTimeout(f *testing.F) {
	for _, d := range []int64{0, 1, 99999999, 100000000, int64(250 * time.Millisecond), math.MaxInt64, -1} {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		d := time.Duration(n)
		s := propagate.EncodeGRPCTimeout(d)
		got, err := propagate.DecodeGRPCTimeout(s)
		if err != nil {
			t.Fatalf("Decode(Encode(%v)) = %q: %v", d, s, err)
		}
		if d <= 0 {
			if got != 0 {
				t.Fatalf("Decode(Encode(%v)) = %v; want 0", d, got)
			}
			return
		}
		unit := unitOf(t, s)
		if got > d || d-got >= unit {
			t.Fatalf("Decode(Encode(%v)) = %v via %q; want at most d and within one %v", d, got, s, unit)
		}
	})
}

func unitOf(t *testing.T, s string) time.Duration {
	switch s[len(s)-1] {
	case 'n':
		return time.Nanosecond
	case 'u':
		return time.Microsecond
	case 'm':
		return time.Millisecond
	case 'S':
		return time.Second
	case 'M':
		return time.Minute
	case 'H':
		return time.Hour
	}
	t.Fatalf("unknown unit in %q", s)
	return 0
}

func FuzzDecodeConnectTimeout(f *testing.F) {
	fuzzMillis(f, propagate.DecodeConnectTimeout)
}

func FuzzDecodeEnvoyTimeout(f *testing.F) {
	fuzzMillis(f, propagate.DecodeEnvoyTimeout)
}

func fuzzMillis(f *testing.F, decode func(string) (time.Duration, error)) {
	for _, s := range []string{"0", "250", "9999999999", "12345678901", "-1", " 1", "١"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := decode(s)
		if err != nil {
			if !errors.Is(err, propagate.ErrMalformedTimeout) {
				t.Fatalf("decode(%q) error %v does not match ErrMalformedTimeout", s, err)
			}
			return
		}
		if d < 0 || d%time.Millisecond != 0 || len(s) > 10 {
			t.Fatalf("decode(%q) = %v", s, d)
		}
		if got := propagate.EncodeConnectTimeout(d); strings.TrimLeft(s, "0") != strings.TrimLeft(got, "0") {
			t.Fatalf("EncodeConnectTimeout(decode(%q)) = %q", s, got)
		}
	})
}

var sinkDuration time.Duration
var sinkString string

func BenchmarkDecodeGRPCTimeout(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		d, err := propagate.DecodeGRPCTimeout("249871u")
		if err != nil {
			b.Fatal(err)
		}
		sinkDuration = d
	}
}

func BenchmarkEncodeGRPCTimeout(b *testing.B) {
	b.ReportAllocs()
	d := 249871234 * time.Nanosecond
	for b.Loop() {
		sinkString = propagate.EncodeGRPCTimeout(d)
	}
}
