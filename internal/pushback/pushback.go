// Package pushback names grpc-retry-pushback-ms (gRPC A6), a server's answer to
// "may I retry, and when", and reads its one value every layer agrees on: a negative
// number, "do not retry". Packages shortcircuit and propagate send it with a refusal
// for lack of budget, and retry's server side when a layer below already retried;
// package retry reads it (and parses its delays), and package hedge reads "do not
// retry" as a refusal of that copy. The toolkit sends it as an HTTP header too.
package pushback

import (
	"errors"
	"strings"

	"google.golang.org/grpc/status"
)

// Key is the gRPC metadata key (a trailer), and the HTTP header name for
// http.Header's Get, Set, Values and Del, which canonicalize it.
const Key = "grpc-retry-pushback-ms"

// DoNotRetry is the value a refusal sends: a negative pushback, "do not retry", since
// a retry could only arrive with less time.
const DoNotRetry = "-1"

// Refuses reports whether v, a grpc-retry-pushback-ms value, is a well-formed
// negative number (white space around it ignored): the server saying "do not send
// this again", as opposed to a delay or garbage.
func Refuses(v string) bool {
	v = strings.TrimSpace(v)
	if len(v) < 2 || v[0] != '-' {
		return false
	}
	for i := 1; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return true
}

// Error is a gRPC call's error with the grpc-retry-pushback-ms value its last
// attempt's trailer held (package retry attaches it), so that a handler relaying the
// error (deadlinekit.FromGRPC) keeps the downstream's "do not retry" without capturing
// the trailer itself. It keeps the error's gRPC status and unwraps to it.
type Error struct {
	Err   error
	Value string // the trailer's grpc-retry-pushback-ms
}

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns the call's error.
func (e *Error) Unwrap() error { return e.Err }

// GRPCStatus is the status of the call's error, for status.FromError and status.Code.
func (e *Error) GRPCStatus() *status.Status {
	s, _ := status.FromError(e.Err)
	return s
}

// Of returns the pushback value an [*Error] in err's chain carries.
func Of(err error) (string, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Value, true
	}
	return "", false
}
