package pushback

import (
	"net/http"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

var signalNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// Hostile and ordinary values of the signals' headers: "come back" is read apart
// from a "do not retry" beside it, and nothing but "1" marks unprocessed or relayed.
func TestSignals(t *testing.T) {
	for _, c := range []struct {
		name              string
		retryAfter, ms    []string
		want              time.Duration
		unprocessed, rely []string
		wantUnprocessed   bool
	}{
		{name: "nothing"},
		{name: "Retry-After beside do-not-retry", retryAfter: []string{"5"}, ms: []string{"-1"}, want: 5 * time.Second},
		{name: "a positive pushback alone", ms: []string{"250"}, want: 250 * time.Millisecond},
		{name: "Retry-After first", retryAfter: []string{"2"}, ms: []string{"250"}, want: 2 * time.Second},
		{name: "a date in the past", retryAfter: []string{"Fri, 31 Dec 1999 23:59:59 GMT"}},
		{name: "garbage", retryAfter: []string{"soon"}, ms: []string{"x"}},
		{name: "signed", retryAfter: []string{"-5"}, ms: []string{"+5"}},
		{name: "zero", retryAfter: []string{"0"}, ms: []string{"0"}},
		{name: "a control character", retryAfter: []string{"5\x00"}},
		{name: "huge saturates", retryAfter: []string{"99999999999999999999999"}, want: maxDelta},
		{name: "unprocessed", unprocessed: []string{"1"}, wantUnprocessed: true},
		{name: "unprocessed, another value", unprocessed: []string{"yes"}},
		{name: "unprocessed, empty", unprocessed: []string{""}},
		{name: "unprocessed, a list", unprocessed: []string{"0", "1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range c.retryAfter {
				h.Add(RetryAfterKey, v)
			}
			for _, v := range c.ms {
				h.Add(Key, v)
			}
			if got := ComeBackHTTP(h, signalNow); got != c.want {
				t.Errorf("ComeBackHTTP = %v; want %v", got, c.want)
			}
			if got := Unprocessed(c.unprocessed); got != c.wantUnprocessed {
				t.Errorf("Unprocessed(%q) = %v", c.unprocessed, got)
			}
			if got := Relayed(c.unprocessed); got != c.wantUnprocessed {
				t.Errorf("Relayed(%q) = %v", c.unprocessed, got)
			}
		})
	}
}

func FuzzComeBack(f *testing.F) {
	f.Add("5", "-1", int64(0))
	f.Add("", "250", int64(1500))
	f.Add("Fri, 31 Dec 9999 23:59:59 GMT", "x", int64(-1))
	f.Fuzz(func(t *testing.T, retryAfter, ms string, infoMs int64) {
		h := http.Header{RetryAfterKey: {retryAfter}, "Grpc-Retry-Pushback-Ms": {ms}}
		if got := ComeBackHTTP(h, signalNow); got < 0 {
			t.Fatalf("ComeBackHTTP = %v", got)
		}
		st := status.New(codes.Unavailable, "x")
		if infoMs >= 0 {
			st = withRetryInfo(t, st, time.Duration(infoMs)*time.Millisecond)
		}
		if got := ComeBackGRPC(st, metadata.Pairs(Key, ms)); got < 0 {
			t.Fatalf("ComeBackGRPC = %v", got)
		}
	})
}

func withRetryInfo(t *testing.T, st *status.Status, d time.Duration) *status.Status {
	t.Helper()
	with, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	if err != nil {
		t.Fatal(err)
	}
	return with
}
