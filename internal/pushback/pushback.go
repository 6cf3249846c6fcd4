// Package pushback names grpc-retry-pushback-ms (gRPC A6), a server's answer to
// "may I retry, and when", and reads its one value every layer agrees on: a negative
// number, "do not retry". Packages shortcircuit and propagate send it with a refusal
// for lack of budget, and retry's server side when a layer below already retried;
// package retry reads it (and parses its delays), and package hedge reads "do not
// retry" as a refusal of that copy. The toolkit sends it as an HTTP header too.
package pushback

import "strings"

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
