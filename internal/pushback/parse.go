package pushback

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// RetryAfterKey is HTTP's pushback header: delta-seconds or an HTTP-date.
const RetryAfterKey = "Retry-After"

// ErrInvalid is returned for a pushback that is malformed or negative, which means
// "do not retry".
var ErrInvalid = errors.New("invalid or negative pushback")

// maxDelta is the largest pushback represented; anything larger saturates to it
// (and is longer than any cap).
const maxDelta = time.Duration(math.MaxInt64)

// ParseRetryAfter parses an HTTP Retry-After value, either delta-seconds ("120") or
// an HTTP-date ("Fri, 31 Dec 1999 23:59:59 GMT", or the obsolete forms net/http
// accepts), and returns the wait it asks for, measured from now for a date. A date in
// the past means no wait (0). A huge number of seconds saturates rather than
// overflowing. Anything else (empty, signed, fractional, garbage) returns an error
// matching [ErrInvalid]: the layer does not retry.
func ParseRetryAfter(v string, now time.Time) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, fmt.Errorf("%w: empty Retry-After", ErrInvalid)
	}
	if isDigits(v) {
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil || secs > uint64(maxDelta/time.Second) {
			return maxDelta, nil // all digits, only too large
		}
		return time.Duration(secs) * time.Second, nil
	}
	if len(v) > 64 { // longer than any HTTP-date
		return 0, fmt.Errorf("%w: malformed Retry-After", ErrInvalid)
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, fmt.Errorf("%w: malformed Retry-After %q", ErrInvalid, v)
	}
	if !t.After(now) {
		return 0, nil
	}
	return t.Sub(now), nil // Sub saturates
}

// ParseMs parses a grpc-retry-pushback-ms value: a non-negative decimal
// number of milliseconds (gRPC A6). A negative value is the server saying "do not
// retry"; it, and a malformed value, return an error matching [ErrInvalid].
// A huge value saturates.
func ParseMs(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	neg := strings.HasPrefix(v, "-")
	if neg && isDigits(v[1:]) {
		return 0, fmt.Errorf("%w: %s %s: the server asks not to retry", ErrInvalid, Key, v)
	}
	if !isDigits(v) {
		if len(v) > 32 {
			v = v[:32] + "…"
		}
		return 0, fmt.Errorf("%w: malformed %s %q", ErrInvalid, Key, v)
	}
	ms, err := strconv.ParseUint(v, 10, 64)
	if err != nil || ms > uint64(maxDelta/time.Millisecond) {
		return maxDelta, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// RetryInfoDelay looks for google.rpc.RetryInfo in the status details. found reports
// whether there is one; delay is its retry_delay (0 when unset, in which case the
// layer uses its backoff). An invalid or negative retry_delay returns an error
// matching [ErrInvalid]. A huge delay saturates.
func RetryInfoDelay(st *status.Status) (delay time.Duration, found bool, err error) {
	if st == nil {
		return 0, false, nil
	}
	p := st.Proto()
	if len(p.GetDetails()) == 0 {
		return 0, false, nil
	}
	for _, d := range st.Details() {
		ri, ok := d.(*errdetails.RetryInfo)
		if !ok {
			continue
		}
		rd := ri.GetRetryDelay()
		if rd == nil {
			return 0, true, nil
		}
		if err := rd.CheckValid(); err != nil {
			return 0, true, fmt.Errorf("%w: RetryInfo: %v", ErrInvalid, err)
		}
		if rd.GetSeconds() < 0 || rd.GetNanos() < 0 {
			return 0, true, fmt.Errorf("%w: RetryInfo retry_delay %v is negative", ErrInvalid, rd.AsDuration())
		}
		return rd.AsDuration(), true, nil
	}
	return 0, false, nil
}

// FromHTTP reads an HTTP answer's pushback: grpc-retry-pushback-ms, else
// Retry-After (the first value of each; a date is measured from now). found is false
// when there is neither; err matches [ErrInvalid] for a malformed or negative one
// ("do not retry").
func FromHTTP(h http.Header, now time.Time) (d time.Duration, found bool, err error) {
	if v := h.Values(Key); len(v) > 0 {
		d, err = ParseMs(v[0])
		return d, true, err
	}
	if v := h.Values(RetryAfterKey); len(v) > 0 {
		d, err = ParseRetryAfter(v[0], now)
		return d, true, err
	}
	return 0, false, nil
}

// FromGRPC reads a gRPC answer's pushback: the trailer's grpc-retry-pushback-ms,
// else google.rpc.RetryInfo in st. found and err are as for [FromHTTP].
func FromGRPC(st *status.Status, trailer metadata.MD) (d time.Duration, found bool, err error) {
	if v := trailer.Get(Key); len(v) > 0 {
		d, err = ParseMs(v[0])
		return d, true, err
	}
	return RetryInfoDelay(st)
}
