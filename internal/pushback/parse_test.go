package pushback_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

const huge = time.Duration(1<<63 - 1)

func TestParseRetryAfter(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"1", time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"007", 7 * time.Second, true},
		{"Mon, 30 Nov 2026 12:00:05 GMT", 5 * time.Second, true},
		{"Monday, 30-Nov-26 12:01:00 GMT", time.Minute, true}, // RFC 850
		{"Mon Nov 30 12:00:10 2026", 10 * time.Second, true},  // asctime
		{"Sun, 29 Nov 2026 12:00:00 GMT", 0, true},            // in the past: no wait
		{"Thu, 01 Jan 1970 00:00:00 GMT", 0, true},
		{"99999999999999999999999999", huge, true}, // only too large: saturates (and any cap stops it)
		{"9223372036854775807", huge, true},
		{"9223372036", 9223372036 * time.Second, true},
		{"9223372037", huge, true},
		// hostile
		{"", 0, false},
		{"   ", 0, false},
		{"-1", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"1e3", 0, false},
		{"0x10", 0, false},
		{"5s", 0, false},
		{"1 2", 0, false},
		{"١٢", 0, false}, // Arabic-Indic digits
		{"Mon, 30 Nov 2026 25:00:00 GMT", 0, false},
		{"Mon, 32 Nov 2026 12:00:00 GMT", 0, false},
		{"Mon, 30 Nov 2026 12:00:00 PST", 0, false},
		{"tomorrow", 0, false},
		{"\x00", 0, false},
		{strings.Repeat("9", 10) + "\n", huge, true},
		{strings.Repeat("a", 1<<16), 0, false},
		{"Mon, 30 Nov 2026 12:00:05 GMT; foo", 0, false},
	}
	for _, c := range cases {
		got, err := pushback.ParseRetryAfter(c.in, now)
		if c.ok != (err == nil) || (c.ok && got != c.want) {
			t.Errorf("ParseRetryAfter(%.40q) = %v, %v; want %v, ok=%v", c.in, got, err, c.want, c.ok)
		}
		if err != nil && !errors.Is(err, pushback.ErrInvalid) {
			t.Errorf("ParseRetryAfter(%.40q) error %v does not match ErrInvalid", c.in, err)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "120", "-1", "1.5", "Mon, 30 Nov 2026 12:00:05 GMT", "Mon Nov 30 12:00:10 2026", "99999999999999999999", "", " 7 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := pushback.ParseRetryAfter(s, now)
		if err != nil {
			if d != 0 || !errors.Is(err, pushback.ErrInvalid) {
				t.Fatalf("%q: %v, %v", s, d, err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("%q: negative wait %v", s, d)
		}
	})
}

func TestParseMs(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"250", 250 * time.Millisecond, true},
		{" 1000 ", time.Second, true},
		{"9223372036854", 9223372036854 * time.Millisecond, true},
		{"9223372036855", huge, true},
		{"123456789012345678901234567890", huge, true},
		// "do not retry"
		{"-1", 0, false},
		{"-0", 0, false},
		{"-9999999999999999999999", 0, false},
		// hostile
		{"", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"abc", 0, false},
		{"5ms", 0, false},
		{"--1", 0, false},
		{"-", 0, false},
		{"0x10", 0, false},
		{"1 0", 0, false},
		{"\xff\xfe", 0, false},
		{strings.Repeat("x", 1<<16), 0, false},
	}
	for _, c := range cases {
		got, err := pushback.ParseMs(c.in)
		if c.ok != (err == nil) || (c.ok && got != c.want) {
			t.Errorf("ParseMs(%.40q) = %v, %v; want %v, ok=%v", c.in, got, err, c.want, c.ok)
		}
		if err != nil && (!errors.Is(err, pushback.ErrInvalid) || len(err.Error()) > 200) {
			t.Errorf("ParseMs(%.40q) error %.300q: want ErrInvalid, short", c.in, err)
		}
	}
}

func FuzzParseMs(f *testing.F) {
	for _, s := range []string{"0", "250", "-1", "abc", "99999999999999999999", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := pushback.ParseMs(s)
		if err != nil {
			if d != 0 || !errors.Is(err, pushback.ErrInvalid) {
				t.Fatalf("%q: %v, %v", s, d, err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("%q: negative wait %v", s, d)
		}
	})
}

func statusWithDetails(t testing.TB, details ...*anypb.Any) *status.Status {
	t.Helper()
	return status.FromProto(&spb.Status{Code: int32(codes.ResourceExhausted), Message: "quota", Details: details})
}

func retryInfoAny(t testing.TB, d *durationpb.Duration) *anypb.Any {
	t.Helper()
	a, err := anypb.New(&errdetails.RetryInfo{RetryDelay: d})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestRetryInfoDelay(t *testing.T) {
	other, _ := anypb.New(&errdetails.ErrorInfo{Reason: "QUOTA"})
	cases := []struct {
		name  string
		st    *status.Status
		want  time.Duration
		found bool
		ok    bool
	}{
		{"nil status", nil, 0, false, true},
		{"no details", status.New(codes.ResourceExhausted, "x"), 0, false, true},
		{"other detail only", statusWithDetails(t, other), 0, false, true},
		{"1.5s", statusWithDetails(t, other, retryInfoAny(t, &durationpb.Duration{Seconds: 1, Nanos: 5e8})), 1500 * time.Millisecond, true, true},
		{"no delay", statusWithDetails(t, retryInfoAny(t, nil)), 0, true, true},
		{"zero", statusWithDetails(t, retryInfoAny(t, &durationpb.Duration{})), 0, true, true},
		{"first wins", statusWithDetails(t, retryInfoAny(t, durationpb.New(time.Second)), retryInfoAny(t, durationpb.New(time.Hour))), time.Second, true, true},
		{"huge saturates", statusWithDetails(t, retryInfoAny(t, &durationpb.Duration{Seconds: 315576000000})), huge, true, true},
		// hostile
		{"negative", statusWithDetails(t, retryInfoAny(t, &durationpb.Duration{Seconds: -1})), 0, true, false},
		{"negative nanos", statusWithDetails(t, retryInfoAny(t, &durationpb.Duration{Nanos: -5})), 0, true, false},
		{"mixed signs", statusWithDetails(t, retryInfoAny(t, &durationpb.Duration{Seconds: 1, Nanos: -5})), 0, true, false},
		{"nanos out of range", statusWithDetails(t, retryInfoAny(t, &durationpb.Duration{Nanos: 2e9})), 0, true, false},
		{"seconds out of range", statusWithDetails(t, retryInfoAny(t, &durationpb.Duration{Seconds: 1 << 62})), 0, true, false},
		{"garbage bytes", statusWithDetails(t, &anypb.Any{TypeUrl: "type.googleapis.com/google.rpc.RetryInfo", Value: []byte{0xff, 0xff, 0xff}}), 0, false, true},
		{"unknown type", statusWithDetails(t, &anypb.Any{TypeUrl: "type.googleapis.com/no.Such", Value: []byte{1}}), 0, false, true},
	}
	for _, c := range cases {
		got, found, err := pushback.RetryInfoDelay(c.st)
		if got != c.want || found != c.found || c.ok != (err == nil) {
			t.Errorf("%s: RetryInfoDelay = %v, %v, %v; want %v, %v, ok=%v", c.name, got, found, err, c.want, c.found, c.ok)
		}
		if err != nil && !errors.Is(err, pushback.ErrInvalid) {
			t.Errorf("%s: %v does not match ErrInvalid", c.name, err)
		}
	}
}

// FuzzRetryInfoDelay feeds arbitrary bytes as a RetryInfo detail (and arbitrary
// seconds/nanos as a well-formed one).
func FuzzRetryInfoDelay(f *testing.F) {
	f.Add([]byte{0x0a, 0x02, 0x08, 0x01}, int64(1), int32(0))
	f.Add([]byte{0xff}, int64(-1), int32(-1))
	f.Fuzz(func(t *testing.T, raw []byte, secs int64, nanos int32) {
		st := statusWithDetails(t, &anypb.Any{TypeUrl: "type.googleapis.com/google.rpc.RetryInfo", Value: raw})
		if d, _, err := pushback.RetryInfoDelay(st); err == nil && d < 0 {
			t.Fatalf("raw %x: negative delay %v", raw, d)
		}
		st = statusWithDetails(t, retryInfoAny(t, &durationpb.Duration{Seconds: secs, Nanos: nanos}))
		d, found, err := pushback.RetryInfoDelay(st)
		if !found {
			t.Fatalf("RetryInfo{%d, %d} not found", secs, nanos)
		}
		if err == nil && d < 0 {
			t.Fatalf("RetryInfo{%d, %d}: negative delay %v", secs, nanos, d)
		}
		if err != nil && !errors.Is(err, pushback.ErrInvalid) {
			t.Fatalf("RetryInfo{%d, %d}: %v", secs, nanos, err)
		}
	})
}
