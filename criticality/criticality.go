package criticality

import (
	"context"
	"errors"
	"strconv"
)

// Level is how much a request is worth under overload. The zero value is
// [Critical], the default. Levels compare with < and >: the lower is shed first.
type Level int8

// The levels, least important first.
const (
	// Sheddable requests may fail at any time: prefetches, speculative work.
	Sheddable Level = iota - 2
	// SheddablePlus is batch work that may be shed and will be retried later.
	SheddablePlus
	// Critical is the default: a user waits for the answer.
	Critical
	// CriticalPlus is for the requests whose loss costs the most (a checkout, a
	// payment): shed last.
	CriticalPlus
)

// Header is the HTTP header that carries a level between services, in canonical
// form; [MetadataKey] is the same header as gRPC metadata.
const (
	Header      = "Deadlinekit-Criticality"
	MetadataKey = "deadlinekit-criticality"
)

// String returns the level's wire form: "critical_plus", "critical",
// "sheddable_plus" or "sheddable"; a value outside the four, "Level(n)".
func (l Level) String() string {
	switch l {
	case CriticalPlus:
		return "critical_plus"
	case Critical:
		return "critical"
	case SheddablePlus:
		return "sheddable_plus"
	case Sheddable:
		return "sheddable"
	}
	return "Level(" + strconv.Itoa(int(l)) + ")"
}

// Valid reports whether l is one of the four levels.
func (l Level) Valid() bool { return l >= Sheddable && l <= CriticalPlus }

type key struct{}

// With returns a copy of ctx carrying level l: the level of the work done under it
// and of every call made with it. A value outside the four levels is clamped to the
// nearest one.
func With(ctx context.Context, l Level) context.Context {
	return context.WithValue(ctx, key{}, min(max(l, Sheddable), CriticalPlus))
}

// From returns the level ctx carries, or [Critical] when it carries none.
func From(ctx context.Context) Level {
	l, _ := ctx.Value(key{}).(Level)
	return l
}

// ErrMalformed is the sentinel of a level that does not parse. The concrete error
// is a [*ParseError].
var ErrMalformed = errors.New("malformed criticality")

// ParseError describes a malformed level: the header, why, and a quoted, shortened
// copy of the value.
type ParseError struct {
	Header string // the header's canonical name, [Header]
	Value  string // the value received, cut to at most 32 bytes
	Reason string // what is wrong
}

func (e *ParseError) Error() string {
	return "malformed " + e.Header + " header " + strconv.Quote(e.Value) + ": " + e.Reason
}

// Is reports whether target is [ErrMalformed].
func (e *ParseError) Is(target error) bool { return target == ErrMalformed }

// Malformed returns the *ParseError for value with reason (for an adapter that
// refuses a header it read, say because it came twice).
func Malformed(value, reason string) error {
	const maxShown = 32
	if len(value) > maxShown {
		value = value[:maxShown] + "…"
	}
	return &ParseError{Header: Header, Value: value, Reason: reason}
}

// longest is the length of the longest level's name.
const longest = len("sheddable_plus")

// Parse reads a level in its wire form ([Level.String]). Letters match in either
// ASCII case ("CRITICAL_PLUS", the SRE book's spelling, is critical_plus), and
// spaces and tabs around the value are ignored, as HTTP ignores them around a
// field's value; nothing else is accepted: no other separator ("critical-plus"),
// no number, no list ("critical, sheddable": a header sent twice and joined), no
// character outside ASCII (no Unicode case folding: "ſheddable" is not
// sheddable). Anything else is a [*ParseError] naming the header and the reason.
func Parse(s string) (Level, error) {
	v := trim(s)
	if v == "" {
		return Critical, Malformed(s, "empty value")
	}
	if len(v) <= longest {
		for _, l := range [...]Level{CriticalPlus, Critical, SheddablePlus, Sheddable} {
			if equalFoldASCII(v, l.String()) {
				return l, nil
			}
		}
	}
	return Critical, Malformed(s, reason(v))
}

// reason says why v, trimmed and not a level, is not one.
func reason(v string) string {
	const want = "want critical_plus, critical, sheddable_plus or sheddable"
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= 0x80:
			return "non-ASCII character (" + want + ")"
		case c < 0x20 || c == 0x7f:
			return "control character (" + want + ")"
		case c == ',':
			return "a list of values (" + want + ")"
		}
	}
	if len(v) > longest {
		return "too long (" + want + ")"
	}
	return "unknown level (" + want + ")"
}

func trim(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// equalFoldASCII reports whether s equals lower, a lower-case ASCII string, in
// either ASCII case.
func equalFoldASCII(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
