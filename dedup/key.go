package dedup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MaxKeyLength is the longest idempotency key accepted, in characters (the quotes of
// a quoted key not counted).
const MaxKeyLength = 255

// ErrMalformedKey is the sentinel of every key [ParseKey] refuses; the concrete error
// is a [*KeyError].
var ErrMalformedKey = errors.New("malformed Idempotency-Key")

// KeyError says why an idempotency key was refused. errors.Is(err, ErrMalformedKey)
// holds for it.
type KeyError struct {
	Reason string
}

func (e *KeyError) Error() string { return "malformed Idempotency-Key: " + e.Reason }

// Is reports whether target is [ErrMalformedKey].
func (e *KeyError) Is(target error) bool { return target == ErrMalformedKey }

// ParseKey reads the values of an Idempotency-Key header (or idempotency-key
// metadata): exactly one value, either a bare token of 1–255 visible ASCII
// characters (0x21–0x7E, none of them '"', ',' or '\') or a quoted structured-field
// string (RFC 8941 §3.3.3: '"', then printable ASCII 0x20–0x7E with '"' and '\'
// escaped by '\', then '"') whose content is 1–255 characters once unescaped. White
// space around the value is ignored; structured-field parameters are not accepted.
// It returns the key (unescaped, without quotes).
func ParseKey(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", &KeyError{Reason: "missing"}
	case 1:
	default:
		return "", &KeyError{Reason: strconv.Itoa(len(values)) + " values, want one"}
	}
	v := trimOWS(values[0])
	if v == "" {
		return "", &KeyError{Reason: "empty"}
	}
	if v[0] != '"' {
		return bareKey(v)
	}
	return quotedKey(v)
}

func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

func bareKey(v string) (string, error) {
	if len(v) > MaxKeyLength {
		return "", &KeyError{Reason: "longer than " + strconv.Itoa(MaxKeyLength) + " characters"}
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == ',':
			return "", &KeyError{Reason: "a list of values (','), want one key"}
		case c == '"' || c == '\\':
			return "", &KeyError{Reason: "a quote or backslash in an unquoted key at position " + strconv.Itoa(i)}
		case c < 0x21 || c > 0x7e:
			return "", &KeyError{Reason: badChar(v, i) + " is not visible ASCII"}
		}
	}
	return v, nil
}

func quotedKey(v string) (string, error) {
	// Count the content first: most keys have no escapes, and are returned as a
	// substring without allocating.
	n, escapes := 0, false
	i := 1
	for ; i < len(v); i++ {
		c := v[i]
		if c == '"' {
			break
		}
		if c == '\\' {
			i++
			if i >= len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", &KeyError{Reason: "a backslash not followed by '\"' or '\\' at position " + strconv.Itoa(i-1)}
			}
			escapes = true
		} else if c < 0x20 || c > 0x7e {
			return "", &KeyError{Reason: badChar(v, i) + " is not printable ASCII"}
		}
		n++
		if n > MaxKeyLength {
			return "", &KeyError{Reason: "longer than " + strconv.Itoa(MaxKeyLength) + " characters"}
		}
	}
	switch {
	case i >= len(v):
		return "", &KeyError{Reason: "a quoted key without its closing quote"}
	case i != len(v)-1:
		if v[i+1] == ';' {
			return "", &KeyError{Reason: "parameters after the key are not accepted"}
		}
		return "", &KeyError{Reason: "characters after the closing quote (a list of values?)"}
	case n == 0:
		return "", &KeyError{Reason: "empty"}
	}
	if !escapes {
		return v[1 : len(v)-1], nil
	}
	b := make([]byte, 0, n)
	for j := 1; j < len(v)-1; j++ {
		if v[j] == '\\' {
			j++
		}
		b = append(b, v[j])
	}
	return string(b), nil
}

// setFingerprint sets t.key (t.inbound in ctx's scope, as [core.storeKey] writes
// it), t.fp (sum in hex) and t.token (a new lease token) in one string: one
// allocation for the three; and t.sum, which the memory store keeps instead of
// decoding t.fp. The formats are [newToken]'s and a SHA-256 in hex, as
// ever (a shared Redis holds records of older versions).
func (c *core) setFingerprint(ctx context.Context, t *ticket, sum *[sha256.Size]byte) {
	scope := c.scope(ctx)
	var fp [2 * sha256.Size]byte
	hex.Encode(fp[:], sum[:])
	var token [tokenLen]byte
	putToken(&token)
	var lenBuf [20]byte
	n := strconv.AppendInt(lenBuf[:0], int64(len(scope)), 10)
	k := len(n) + 1 + len(scope) + 1 + len(t.inbound)
	var b strings.Builder
	b.Grow(k + len(fp) + len(token))
	b.Write(n)
	b.WriteByte(':')
	b.WriteString(scope)
	b.WriteByte(':')
	b.WriteString(t.inbound)
	b.Write(fp[:])
	b.Write(token[:])
	s := b.String()
	t.key, t.fp, t.token = s[:k], s[k:k+len(fp)], s[k+len(fp):]
	t.sum = *sum
}

// badChar names the character that starts at byte i of v, as the user typed it: the
// whole rune ('é' (U+00E9)), not its first byte, or the byte when v is not UTF-8
// there. The position is in bytes.
func badChar(v string, i int) string {
	r, size := utf8.DecodeRuneInString(v[i:])
	if r == utf8.RuneError && size <= 1 {
		return fmt.Sprintf("byte 0x%02X at position %d (not UTF-8)", v[i], i)
	}
	return fmt.Sprintf("character %s (U+%04X) at position %d", strconv.QuoteRune(r), r, i)
}

// ErrorDomain is the domain of the google.rpc.ErrorInfo on this package's gRPC and
// connect refusals that carry one.
const ErrorDomain = "deadlinekit.dev/dedup"

// KeyReusedReason is the google.rpc.ErrorInfo reason on the FailedPrecondition that
// refuses a key used before for a different request (method, path or message
// differ). An HTTP hop that relays the refusal answers 422, as this package's HTTP
// middleware does, rather than FailedPrecondition's general 400 (see
// deadlinekit.HTTPStatus).
const KeyReusedReason = "IDEMPOTENCY_KEY_REUSED"

// keyReused is the refusal of a key used before for a different request: status
// FailedPrecondition with msg and ErrorInfo{KeyReusedReason, ErrorDomain}.
func keyReused(msg string) error {
	st := status.New(codes.FailedPrecondition, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: KeyReusedReason, Domain: ErrorDomain}); err == nil {
		st = d
	}
	return st.Err()
}

// IsKeyReused reports whether err, a gRPC or connect call's error, is this package's
// refusal of a key used before for a different request (FailedPrecondition with the
// ErrorInfo of [KeyReusedReason] in [ErrorDomain]).
func IsKeyReused(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == KeyReusedReason && info.GetDomain() == ErrorDomain {
			return true
		}
	}
	return false
}
