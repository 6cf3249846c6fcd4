package propagate

import (
	"errors"
	"math"
	"strconv"
	"time"
)

// Header and metadata names this package reads and writes. HTTP header names are in
// canonical form; gRPC metadata keys are the lower-case forms.
const (
	// HeaderGRPCTimeout carries the budget on gRPC and, with this toolkit, on HTTP.
	HeaderGRPCTimeout = "Grpc-Timeout"
	// HeaderConnectTimeout is the Connect protocol's budget in milliseconds.
	HeaderConnectTimeout = "Connect-Timeout-Ms"
	// HeaderEnvoyTimeout is the budget Envoy expects the request to take, in
	// milliseconds. It is read only when the proxy is trusted ([WithTrustEnvoy]).
	HeaderEnvoyTimeout = "X-Envoy-Expected-Rq-Timeout-Ms"
)

// ErrMalformedTimeout is the sentinel for an inbound timeout header that does not
// follow its grammar. The concrete error is a [*TimeoutError].
var ErrMalformedTimeout = errors.New("malformed timeout header")

// TimeoutError describes a malformed timeout header value: which header, why, and a
// quoted, shortened copy of the value.
type TimeoutError struct {
	Header string // canonical header name, e.g. "Grpc-Timeout"
	Value  string // the value received, cut to at most 32 bytes
	Reason string // what is wrong, e.g. "more than 8 digits"
}

func (e *TimeoutError) Error() string {
	return "malformed " + e.Header + " header " + strconv.Quote(e.Value) + ": " + e.Reason
}

// Is reports whether target is [ErrMalformedTimeout].
func (e *TimeoutError) Is(target error) bool { return target == ErrMalformedTimeout }

func malformed(header, value, reason string) error {
	const maxShown = 32
	if len(value) > maxShown {
		value = value[:maxShown] + "…"
	}
	return &TimeoutError{Header: header, Value: value, Reason: reason}
}

// grpcUnits are the units of grpc-timeout, finest first.
var grpcUnits = [...]struct {
	unit time.Duration
	sym  byte
}{
	{time.Nanosecond, 'n'},
	{time.Microsecond, 'u'},
	{time.Millisecond, 'm'},
	{time.Second, 'S'},
	{time.Minute, 'M'},
	{time.Hour, 'H'},
}

const maxGRPCTimeoutValue = 99999999 // at most 8 digits

// EncodeGRPCTimeout returns the grpc-timeout value for d: at most 8 digits in the
// finest unit that can hold d, rounded DOWN, so the next hop is never handed time it
// does not have. A zero or negative d encodes as "0n" (already expired). Durations
// above 99999999 hours cannot occur (time.Duration tops out near 2.5 million hours).
func EncodeGRPCTimeout(d time.Duration) string {
	if d <= 0 {
		return "0n"
	}
	var buf [10]byte
	for _, u := range grpcUnits {
		if v := d / u.unit; v <= maxGRPCTimeoutValue {
			b := strconv.AppendInt(buf[:0], int64(v), 10)
			b = append(b, u.sym)
			return string(b)
		}
	}
	// Unreachable: math.MaxInt64 ns is about 2.56e6 hours, which fits in 8 digits.
	return "99999999H"
}

// DecodeGRPCTimeout parses a grpc-timeout value as the gRPC over HTTP/2 spec defines
// it: 1 to 8 ASCII digits, then one unit among H (hours), M (minutes), S (seconds),
// m (milliseconds), u (microseconds), n (nanoseconds). Anything else — the empty
// string, a sign, a space, more than 8 digits, a non-ASCII digit, a missing or unknown
// unit — is a [*TimeoutError] that names the problem. A value too large for a
// time.Duration saturates at the largest one instead of overflowing.
func DecodeGRPCTimeout(s string) (time.Duration, error) {
	const h = HeaderGRPCTimeout
	if s == "" {
		return 0, malformed(h, s, "empty value")
	}
	n := len(s) - 1
	if n > 8 {
		return 0, malformed(h, s, "more than 8 digits")
	}
	var unit time.Duration
	switch s[n] {
	case 'n':
		unit = time.Nanosecond
	case 'u':
		unit = time.Microsecond
	case 'm':
		unit = time.Millisecond
	case 'S':
		unit = time.Second
	case 'M':
		unit = time.Minute
	case 'H':
		unit = time.Hour
	default:
		if s[n] >= '0' && s[n] <= '9' {
			return 0, malformed(h, s, "missing unit (one of H M S m u n)")
		}
		return 0, malformed(h, s, "unknown unit (want one of H M S m u n)")
	}
	if n == 0 {
		return 0, malformed(h, s, "no digits before the unit")
	}
	v, err := digits(h, s, s[:n])
	if err != nil {
		return 0, err
	}
	if v > math.MaxInt64/int64(unit) {
		return time.Duration(math.MaxInt64), nil
	}
	return time.Duration(v) * unit, nil
}

// digits parses 1 or more ASCII digits (the caller bounds the count, at most 18).
func digits(header, whole, ds string) (int64, error) {
	var v int64
	for i := 0; i < len(ds); i++ {
		c := ds[i]
		if c < '0' || c > '9' {
			switch {
			case c == '+' || c == '-':
				return 0, malformed(header, whole, "sign not allowed")
			case c == ' ' || c == '\t':
				return 0, malformed(header, whole, "space not allowed")
			case c >= 0x80:
				return 0, malformed(header, whole, "non-ASCII character (only ASCII digits 0-9 are allowed)")
			default:
				return 0, malformed(header, whole, "not a digit")
			}
		}
		v = v*10 + int64(c-'0')
	}
	return v, nil
}

const maxConnectDigits = 10

// EncodeConnectTimeout returns the Connect-Timeout-Ms value for d: whole milliseconds,
// rounded down, at most 10 digits (larger budgets saturate at 9999999999 ms, about 115
// days). A budget under one millisecond encodes as "0" (already expired).
func EncodeConnectTimeout(d time.Duration) string {
	ms := max(int64(d/time.Millisecond), 0)
	ms = min(ms, 9999999999)
	return strconv.FormatInt(ms, 10)
}

// DecodeConnectTimeout parses a Connect-Timeout-Ms value: 1 to 10 ASCII digits, in
// milliseconds.
func DecodeConnectTimeout(s string) (time.Duration, error) {
	return decodeMillis(HeaderConnectTimeout, s)
}

// DecodeEnvoyTimeout parses an X-Envoy-Expected-Rq-Timeout-Ms value: 1 to 10 ASCII
// digits, in milliseconds (Envoy writes a non-negative integer; longer values are
// refused rather than trusted).
func DecodeEnvoyTimeout(s string) (time.Duration, error) {
	return decodeMillis(HeaderEnvoyTimeout, s)
}

func decodeMillis(header, s string) (time.Duration, error) {
	if s == "" {
		return 0, malformed(header, s, "empty value")
	}
	if len(s) > maxConnectDigits {
		return 0, malformed(header, s, "more than 10 digits")
	}
	v, err := digits(header, s, s)
	if err != nil {
		return 0, err
	}
	// 10 digits of milliseconds (< 1e10 ms) is far below the time.Duration limit.
	return time.Duration(v) * time.Millisecond, nil
}
