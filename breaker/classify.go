package breaker

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

// Outcome is what one call says of its target's health.
type Outcome uint8

const (
	// Success: a working server answered, whatever the answer (4xx and business
	// gRPC codes included).
	Success Outcome = iota
	// Failure: the target did not answer, or said it cannot (502, 503, UNAVAILABLE),
	// or timed out with a fair budget.
	Failure
	// Neutral: the call says nothing about the target (the caller gave up, or gave it
	// too little time, or it was refused for lack of budget): counted neither way.
	Neutral
)

var outcomeNames = [...]string{Success: "success", Failure: "failure", Neutral: "neutral"}

// String returns "success", "failure" or "neutral".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Result is what a [Classifier] is given of one finished call. Its references (the
// response, the trailer) are valid only during the call to the classifier.
type Result struct {
	// Target is the circuit's name: "https://example.com:443", a gRPC ClientConn's
	// target, or the key [WithKey] gave.
	Target string
	// Method is the gRPC full method, or the HTTP method.
	Method string
	// GRPC says the call is a gRPC call: Err then carries its status.
	GRPC bool
	// Err is the call's error: a transport error (HTTP), the call's status (gRPC).
	Err error
	// Response is the HTTP response (nil for gRPC, and with Err).
	Response *http.Response
	// Trailer is the gRPC call's trailer metadata, when the call got one.
	Trailer metadata.MD
	// Took is how long the call ran (HTTP: until the response's header).
	Took time.Duration
	// Budget is the time that was left before the caller's deadline when the call was
	// sent; HasBudget is false when the context had no deadline.
	Budget    time.Duration
	HasBudget bool
	// Typical is the target's recent median latency (of its successes, over the
	// window); HasTypical is false while too few are known.
	Typical    time.Duration
	HasTypical bool
	// CallerErr is the caller's context's error when the call ended: the caller
	// cancelled (context.Canceled) or its deadline passed.
	CallerErr error
	// ServerStreams says the call is a stream on which the server sends a stream of
	// messages (server streaming, bidi), as grpc.StreamDesc says it: how long such
	// a stream runs is its caller's choice (a watch listens until its deadline).
	ServerStreams bool
	// SheddingSince says that, after this call was sent, the target refused
	// another call through the same circuit in a way that shows it up (one that
	// says when to come back, a guard's refusal for lack of budget of a call whose
	// budget was at least the target's typical latency, a failure relayed from its
	// downstream) or for load (HTTP 429, gRPC RESOURCE_EXHAUSTED but a message size
	// limit's: an overloaded guard's refusal over gRPC), or served one of a higher
	// criticality than this call's (package criticality): the target was up and
	// shedding its lower levels while this call waited. A success of the same
	// level does not count: a target that hangs most calls and answers some is
	// failing, not shedding. It may miss an answer that came within a millisecond
	// of the last one the circuit noted (never the other way).
	SheddingSince bool
}

// Classifier decides what a call says of its target's health.
type Classifier func(r Result) Outcome

// Classify is the default [Classifier]. In order:
//
//   - neutral: a local refusal before sending ([deadline.ErrInsufficientBudget]:
//     propagate's floor; [ErrOpen] or [ErrThrottled] from a breaker beneath); a downstream guard's refusal for lack of budget (504 or
//     DEADLINE_EXCEEDED with grpc-retry-pushback-ms -1); a call whose caller
//     cancelled (or that failed CANCELED); a timeout (the caller's deadline passed, a
//     context.DeadlineExceeded or net timeout error, DEADLINE_EXCEEDED, 504) of a call
//     whose budget was below the target's typical latency: the caller gave it too
//     little time, which is not the target's fault; a timeout of a server-streaming
//     or bidi stream ([Result.ServerStreams]) when its caller's deadline has passed
//     or it ran for half its budget or more (the deadline the layers beneath sent,
//     less their reserve): a watch that heard nothing before the deadline its
//     caller set is idle, not failed; a timeout of a call while the target, after
//     it was sent, refused another call through the circuit with one of the
//     refusals below (for lack of budget, only of a call whose budget was at
//     least the target's typical latency: a shorter one is refused by a hung
//     target's guard too), or for load (429, RESOURCE_EXHAUSTED), or served one
//     of a higher criticality ([Result.SheddingSince]):
//     the target is up and shedding, and this call waited in an overloaded
//     server's queue (a server that serves its critical calls, or refuses some
//     calls, and lets its sheddable ones time out), which admission and the
//     throttle deal with: opened, the circuit would refuse the calls the target
//     still serves;
//   - neutral too: HTTP 503, and UNAVAILABLE, that say when to come back (a positive
//     Retry-After, google.rpc.RetryInfo or grpc-retry-pushback-ms, read apart from a
//     "do not retry" beside it): the server is up and shedding load, or relaying a
//     circuit open further down, and answered at once; the retry layer honours its
//     wait, and a breaker opening on it would starve a server that still serves part
//     of its load; and HTTP 502, 503, 504, UNAVAILABLE and DEADLINE_EXCEEDED that the server marks as its
//     downstream's failure (deadlinekit-relayed: 1, as deadlinekit.GRPCError and
//     WriteHTTPError send): the server is up, and its own breaker guards that
//     downstream;
//   - failure: any other timeout (the call had a fair budget, or no deadline, or the
//     target's typical latency is not known, and the target was not seen
//     shedding while it ran: a blackholed target's calls, or one that hangs most
//     calls and answers some of the same level); HTTP 502 and 503; UNAVAILABLE; an HTTP
//     transport error (connection refused or reset, DNS, TLS, EOF); a gRPC error
//     without a status;
//   - success: every other answer: HTTP 1xx–4xx and 500, every other gRPC code
//     (NOT_FOUND, INVALID_ARGUMENT, INTERNAL, …): the server is up.
func Classify(r Result) Outcome {
	if r.Err != nil {
		if errors.Is(r.Err, deadline.ErrInsufficientBudget) || errors.Is(r.Err, ErrOpen) || errors.Is(r.Err, ErrThrottled) {
			return Neutral // refused before sending: nothing reached the target
		}
		if st, ok := status.FromError(r.Err); ok && r.GRPC {
			switch st.Code() {
			case codes.Canceled:
				return Neutral
			case codes.DeadlineExceeded:
				if upRefusal(&r) {
					return Neutral
				}
				return timedOut(r)
			}
			if errors.Is(r.CallerErr, context.Canceled) {
				return Neutral
			}
			if st.Code() == codes.Unavailable {
				if upRefusal(&r) {
					return Neutral
				}
				return Failure
			}
			return Success
		}
		if errors.Is(r.Err, context.Canceled) || errors.Is(r.CallerErr, context.Canceled) {
			return Neutral
		}
		if isTimeout(r.Err) || r.CallerErr != nil {
			return timedOut(r)
		}
		return Failure
	}
	if r.Response == nil {
		if r.GRPC {
			return Success
		}
		return Neutral // nothing to judge: a RoundTripper breaking its contract
	}
	switch r.Response.StatusCode {
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		if upRefusal(&r) {
			return Neutral
		}
		return Failure
	case http.StatusGatewayTimeout:
		if upRefusal(&r) {
			return Neutral
		}
		return timedOut(r)
	}
	return Success
}

// answerKind is what an error answer says of why the target did not serve the call,
// read once from its status and headers (or trailer) by [refusalOf].
type answerKind uint8

const (
	notRefusal   answerKind = iota
	relayed                 // deadlinekit-relayed: 1: its downstream's failure
	comeBack                // HTTP 503, UNAVAILABLE, with a positive wait
	cannotFinish            // HTTP 504, DEADLINE_EXCEEDED, with grpc-retry-pushback-ms -1
	tooMany                 // HTTP 429, RESOURCE_EXHAUSTED
)

// refusalOf reads r's answer: an error status (gRPC) or an HTTP status of 400 or
// more, and what its headers say of it.
func refusalOf(r *Result) answerKind {
	if r.GRPC {
		st, ok := status.FromError(r.Err)
		switch {
		case !ok || r.Err == nil:
			return notRefusal
		case pushback.Relayed(r.Trailer.Get(pushback.RelayedKey)):
			return relayed
		case st.Code() == codes.Unavailable && pushback.ComeBackGRPC(st, r.Trailer) > 0:
			return comeBack
		case st.Code() == codes.DeadlineExceeded && refused(r.Trailer.Get(pushback.Key)):
			return cannotFinish
		case st.Code() == codes.ResourceExhausted && !sizeLimit(st.Message()):
			return tooMany
		}
		return notRefusal
	}
	resp := r.Response
	if r.Err != nil || resp == nil || resp.StatusCode < 400 {
		return notRefusal
	}
	switch h := resp.Header; {
	case pushback.Relayed(h.Values(pushback.RelayedKey)):
		return relayed
	case resp.StatusCode == http.StatusServiceUnavailable && pushback.ComeBackHTTP(h, time.Now()) > 0:
		return comeBack
	case resp.StatusCode == http.StatusGatewayTimeout && refused(h.Values(pushback.Key)):
		return cannotFinish
	case resp.StatusCode == http.StatusTooManyRequests:
		return tooMany
	}
	return notRefusal
}

// sizeLimits are the words of the RESOURCE_EXHAUSTED that gRPC and Connect
// implementations give a message larger than the limit set for it: the client's,
// for an answer too large to take or a request too large to send, or the server's,
// for a request too large for it. That is the message's fault, not a refusal for
// load: a method whose answers outgrow the limit would otherwise have the throttle
// refuse the target's other calls.
var sizeLimits = [...]string{
	"larger than max",            // grpc-go: received, sent, after decompression
	"message too large",          // grpc-go: a buffer beyond the machine's int
	"larger than configured max", // connect-go: a message read
	"exceeds sendMaxBytes",       // connect-go: a message sent
	"exceeds getURLMaxBytes",     // connect-go: a GET's URL
}

// sizeLimit reports whether a RESOURCE_EXHAUSTED's message is a message size
// limit's (sizeLimits).
func sizeLimit(msg string) bool {
	for _, s := range sizeLimits {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// upRefusal reports whether r is the answer of a target that is up though it did
// not serve the call: a refusal that says when to come back (HTTP 503, gRPC
// UNAVAILABLE), a guard's refusal for lack of budget (HTTP 504 or
// DEADLINE_EXCEEDED with grpc-retry-pushback-ms -1), or a failure it relays from
// its downstream (deadlinekit-relayed: 1).
func upRefusal(r *Result) bool { return refusalOf(r).up() }

// starved reports whether r's call had a budget below the target's typical
// latency. A guard's refusal of such a call for lack of budget is the caller's
// short budget, which an idle target refuses too, and a hung one still does (the
// guard runs before the handler): it shows the target up, not shedding load.
func starved(r *Result) bool { return r.HasBudget && r.HasTypical && r.Budget < r.Typical }

// up says the answer shows its target up: relayed, come back, or cannot finish.
func (k answerKind) up() bool { return k == relayed || k == comeBack || k == cannotFinish }

// timedOut classifies a timeout: neutral when the call's budget was below the
// target's typical latency (the caller starved it), when it ended a stream of the
// server's messages at the deadline its caller set, or when the target was seen
// shedding while it ran (it is up); else a failure.
func timedOut(r Result) Outcome {
	if r.ServerStreams && (r.CallerErr != nil || r.HasBudget && r.Took >= r.Budget/2) {
		// The caller chose how long to listen. The layers beneath keep a reserve
		// of its budget (propagate), so the stream's own deadline comes a little
		// before the caller's: one that ran for half its budget or more was ended
		// by it.
		return Neutral
	}
	if r.HasBudget && r.HasTypical && r.Budget < r.Typical {
		return Neutral
	}
	if r.SheddingSince {
		// The target shed load while this one waited: it is up and overloaded,
		// which admission and the throttle deal with.
		return Neutral
	}
	return Failure
}

// refused reports whether a grpc-retry-pushback-ms value says "do not retry".
func refused(vs []string) bool { return len(vs) > 0 && pushback.Refuses(vs[0]) }

// isTimeout reports whether err is a timeout: context.DeadlineExceeded, or a net
// error that says it timed out.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// lostAnswer reports whether r is a call whose answer never came: a timeout
// (context.DeadlineExceeded, a net timeout, gRPC DEADLINE_EXCEEDED).
func lostAnswer(r *Result) bool {
	if r.Err == nil {
		return false
	}
	if st, ok := status.FromError(r.Err); ok && r.GRPC {
		return st.Code() == codes.DeadlineExceeded
	}
	return isTimeout(r.Err) || errors.Is(r.CallerErr, context.DeadlineExceeded)
}
