package breaker

import (
	"errors"
	"math"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

// Throttle configures the adaptive throttle, the breaker's soft mode
// ([WithAdaptiveThrottling]): the client-side throttling of Google's SRE book. Over a
// sliding window, each circuit counts per level of criticality the requests it was
// asked to send and the ones its target accepted, and refuses a call locally, before
// sending, with probability max(0, (requests − K·accepts) / (requests + 1)) once the
// window holds MinRequests requests of the level. A target
// that accepts what it is sent is never throttled; one that refuses more than 1 − 1/K
// of it is sent about K times what it accepts, whatever its clients ask; once it
// accepts again, a caller that keeps calling it is soon no longer throttled
// ([WithAdaptiveThrottling] gives the figures). It is plain data; a zero field takes
// [DefaultThrottle]'s.
type Throttle struct {
	// K is how many times what the target accepts it may be sent: 2 lets a target
	// spend up to half of what reaches it on refusals; 1.1 about one refusal in ten
	// accepts. Below 1 it counts as 1; zero or NaN is the default.
	K float64
	// Window is how long a call counts. A target's refusals weigh for this long; a
	// caller that sends a target enough calls to see it accept again (10 in a row
	// with K = 2) stops being throttled sooner, and one that sends too few for that
	// only as the refusals, and its own refusals after them, leave the window. Zero
	// or less is the default.
	Window time.Duration
	// Buckets is the number of steps in which the window moves on, in [1,
	// MaxWindowBuckets]; zero or less is the default.
	Buckets int
	// MinRequests is how many requests of a level (as the throttle weighs them:
	// its own, and what the other levels' answers say of it) the window must hold
	// before the throttle refuses any call of that level: below it, the window is
	// too thin to go on. With 10, a fresh caller's call refused for load and its
	// retry are both sent, and ten refusals in a row throttle the next call with
	// probability 10/11. 1 is the bare formula, which throttles from the first
	// refusal with probability 1/2. Zero or less is the default.
	MinRequests int
}

// DefaultThrottle is the throttle of every circuit without an option, and of
// [WithAdaptiveThrottling] for the zero fields of its [Throttle]: K = 2, as the SRE
// book advises, over 30 s moving on in 10 steps of 3 s, throttling a level once the
// window holds 10 of its requests (the run of accepts that shows a target recovered
// with K = 2), as Envoy's admission control rejects nothing below its rps_threshold.
// 30 s (Envoy's admission control's window) rather than the book's 2 minutes still
// hold 300 calls of a client that sends 10 a second, enough for a probability to
// within a few percent, and bring back four times sooner the callers that send too
// little to prove a recovered target (see [Throttle.Window]).
//
// A program may set it for the breakers it makes next; a zero field of it takes
// the figure above.
var DefaultThrottle = Throttle{K: 2, Window: 30 * time.Second, Buckets: 10, MinRequests: 10}

// builtinThrottle is DefaultThrottle as the package sets it: what a zero field of
// DefaultThrottle takes.
var builtinThrottle = DefaultThrottle

// normalized returns t with its zero fields set to the defaults and its values
// held to their bounds.
func (t Throttle) normalized() Throttle {
	d := DefaultThrottle.filled(builtinThrottle)
	return t.filled(d)
}

// filled returns t with its zero (or NaN) fields set to d's, and its values held
// to their bounds.
func (t Throttle) filled(d Throttle) Throttle {
	if t.K == 0 || math.IsNaN(t.K) {
		t.K = d.K
	}
	t.K = max(t.K, 1)
	if t.Window <= 0 {
		t.Window = d.Window
	}
	if t.Buckets <= 0 {
		t.Buckets = d.Buckets
	}
	t.Buckets = min(t.Buckets, MaxWindowBuckets)
	if t.MinRequests <= 0 {
		t.MinRequests = d.MinRequests
	}
	return t
}

// Probability is the share of calls the throttle refuses locally after requests
// were asked for and accepts accepted over its window: max(0, (requests −
// K·accepts) / (requests + 1)), in [0, 1), and 0 while requests is below
// MinRequests. A K of zero or NaN is [DefaultThrottle]'s, below 1 it counts as 1;
// negative counts count as zero.
func (t Throttle) Probability(requests, accepts int) float64 {
	t = t.normalized()
	if requests < t.MinRequests {
		return 0
	}
	k := t.K
	r, a := float64(max(requests, 0)), float64(max(accepts, 0))
	ka := 0.0
	if a > 0 {
		ka = k * a
	}
	return max(0, (r-ka)/(r+1))
}

// Reject reports whether a call is refused locally given the window's counts, as
// [Throttle.Probability] weighs them. u is a uniform random number in [0, 1): the
// call is refused when u is below the probability. It is a pure function: a seeded
// u gives a reproducible sequence.
func (t Throttle) Reject(requests, accepts int, u float64) bool {
	return u < t.Probability(requests, accepts)
}

// WithAdaptiveThrottling sets the adaptive throttle ([Throttle]) of every circuit,
// the breaker's soft mode: a target that is up but refuses for load makes its
// callers send it less, where the circuit opens only for a target that fails. It is
// on by default, with [DefaultThrottle]: this option gives other figures (a
// Throttle whose zero fields take DefaultThrottle's), [WithoutAdaptiveThrottling]
// turns it off. A server that refuses for load still spends work on each refusal,
// and the retry layer's honouring of each "come back in" does not lower what its
// clients offer it; the throttle does, as Google's clients do by default.
//
// It costs a target that accepts what it is sent next to nothing: while the
// window holds no refusal, a call reads one word and its accept is an atomic
// addition, with no lock, no random draw (BENCHMARKS.md has the closed path's
// figures); it never refuses a call of a level the target accepts at least 1/K
// of. It refuses calls the target never saw, on the strength of what it answered
// before, but not before the window holds [Throttle.MinRequests] requests of the
// level (10): a caller with nothing else in its window sends a lone call's retry
// after a "come back in", and is throttled once ten calls in a row were refused
// (the next with probability 10/11).
//
// The counts are per circuit (a target, or an endpoint with [BalancerName]) and per
// level of criticality ([criticality.From] of the call's context). A refusal of one
// level counts for the levels below it, which the target refuses first, and an
// accept for the levels above, which it accepts first: a sheddable call is
// throttled before a critical one, and a critical-plus call is not throttled while
// the target accepts anything. The counts:
//
//   - a request: every call of the level the closed circuit admits, refused locally
//     or sent (a half-open probe is the circuit's, and is not counted); a call
//     sent counts when it ends, unless it ended as neither of the two below; the
//     throttle's own refusals of a level count until the target shows it no longer
//     refuses that level (below);
//   - a refusal (a request, not accepted): an answer that refuses for load: HTTP 429,
//     503 with a positive Retry-After or grpc-retry-pushback-ms, gRPC
//     RESOURCE_EXHAUSTED (not that of a message larger than a size limit, which
//     grpc-go and connect-go give it: the message's fault, not load), UNAVAILABLE
//     with a positive pushback or RetryInfo;
//   - an accept: any other answer the classifier calls a success, and a failure the
//     target relays from its downstream (deadlinekit-relayed: 1), which it accepted.
//
// A target that does not answer (refused connections, timeouts, 502, a 503 that
// names no wait) is neither: that is the circuit's to count, and a dead target
// still opens it. A refusal of the throttle is a [*ThrottledError].
//
// Counting its own refusals as requests is what holds the target to about K calls
// per accept; it would also keep callers throttled after the target recovers until
// its accepts outweighed them, each letting about K more calls through: longer than
// the window. So once the target has accepted n calls of a level in a row, n the
// least with Kⁿ ≥ 1000 (10 for K = 2), and refused none of it in a whole bucket,
// the throttle's own refusals of the level leave the window; the target's answers
// stay. A target still refusing as much as the throttle lets through does that by
// chance less than once in a thousand, and one that refuses in bursts shorter than
// a bucket never.
//
// In figures (on fake time, `go test -run TestThrottleGoals -v`): a server whose
// refusals cost a tenth of a request's work, offered 10 times its capacity, spends
// all its work on refusals and accepts nothing; through the default throttle it is
// sent 2.03–2.08 calls per accept and spends 9.4–9.8% of its work on refusals once a
// window has passed (9.6–10.7% with the overload's first seconds, before each client's
// window holds MinRequests requests), by one client or by 100. When the load falls to
// 80% of the capacity, the share of the offered calls it accepts is back at 90% or
// more 3–5 s after the overload's end for a client sending 40 calls a second, 9 s
// for one sending 4 (a tenth to a third of the window), where the window alone
// took 1.3–1.6 windows; 100 clients sending 0.4 calls a second each still recover
// only as the window moves on, in 3 to 4 windows.
func WithAdaptiveThrottling(t Throttle) Option {
	t = t.normalized()
	return optionFunc(func(c *config) { c.throttle = &t })
}

// WithoutAdaptiveThrottling turns the adaptive throttle off in every circuit: calls
// of a closed circuit are all sent, whatever the target refuses, and only the
// circuit refuses any ([ErrOpen]). [WithAdaptiveThrottling] after it turns it back
// on.
func WithoutAdaptiveThrottling() Option {
	return optionFunc(func(c *config) { c.throttle = nil })
}

// ErrThrottled is the sentinel of a call the adaptive throttle refused before
// sending it. Match it with [errors.Is]; the concrete error is a [*ThrottledError].
// It does not match [ErrOpen]: the circuit is closed.
var ErrThrottled = errors.New("throttled")

// ThrottledError reports a call that the adaptive throttle of Target's circuit
// refused before sending: over the window, the target refused so much of what it was
// sent at the call's Level that calls of that level are refused locally with
// Probability. RetryAfter is the time in which the window moves on.
//
// Over gRPC its status is RESOURCE_EXHAUSTED with RetryInfo (RetryAfter), so that a
// server relaying it (deadlinekit.GRPCError, WriteHTTPError) answers as an overloaded
// server does: RESOURCE_EXHAUSTED with a come-back, HTTP 503 with Retry-After. The
// retry layer above does not retry it: the throttle counts a retry as one more request
// and sends about K times what its target accepts however many there are, so a
// retry cannot raise the share of calls that get through, only take it from others.
type ThrottledError struct {
	Target      string
	Level       criticality.Level
	Probability float64
	RetryAfter  time.Duration
}

func (e *ThrottledError) Error() string {
	return e.Target + ": throttled, the target refuses for load: " + e.Level.String() +
		" calls refused locally with probability " + strconv.FormatFloat(e.Probability, 'f', 2, 64) + " (call not sent)"
}

// Is reports whether target is [ErrThrottled].
func (e *ThrottledError) Is(target error) bool { return target == ErrThrottled }

// GRPCStatus is RESOURCE_EXHAUSTED with the error's message and RetryAfter as
// google.rpc.RetryInfo.
func (e *ThrottledError) GRPCStatus() *status.Status {
	st := status.New(codes.ResourceExhausted, e.Error())
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(max(e.RetryAfter, time.Millisecond))}); err == nil {
		return d
	}
	return st
}

// pushbackValue is the grpc-retry-pushback-ms the refusal carries: "do not retry".
func (e *ThrottledError) pushbackValue() string { return pushback.DoNotRetry }

// carried is the refusal as the adapters return it, carrying its pushback.
func (e *ThrottledError) carried() error {
	return &pushback.Error{Err: e, Value: e.pushbackValue()}
}

// IsThrottled reports whether err is a refusal of the adaptive throttle, and returns it.
func IsThrottled(err error) (*ThrottledError, bool) {
	var te *ThrottledError
	ok := errors.As(err, &te)
	return te, ok
}

// levels is the number of levels of criticality; a level's index is l − Sheddable.
const levels = 4

func levelIndex(l criticality.Level) int {
	return int(min(max(l, criticality.Sheddable), criticality.CriticalPlus) - criticality.Sheddable)
}

// levelCounts are one level's own counts: requests (refused locally, or sent and
// answered as an accept or a refusal), accepts and refusals.
type levelCounts struct{ requests, accepts, refusals uint32 }

// effective returns the requests and accepts the throttle weighs for level i: its
// own, the refusals of the levels above as requests (the target refuses a level only
// once it refuses every lower one), and the accepts of the levels below as requests
// and accepts (it accepts a level only when it accepts every higher one).
func effective(own *[levels]levelCounts, i int) (requests, accepts int) {
	requests, accepts = int(own[i].requests), int(own[i].accepts)
	for j := 0; j < i; j++ {
		requests += int(own[j].accepts)
		accepts += int(own[j].accepts)
	}
	for j := i + 1; j < levels; j++ {
		requests += int(own[j].refusals)
	}
	return requests, accepts
}

// ThrottleLevel is the adaptive throttle's state for one level of a circuit: the
// requests and accepts it weighs (the level's own, with what the other levels' answers
// say of it) and the probability with which it refuses a call now.
type ThrottleLevel struct {
	Level             criticality.Level
	Requests, Accepts int
	Probability       float64
}

// verdict is what a sent call's end r, classified o, its answer of kind k, says to the throttle: a
// refusal for load, an accept, or nothing (the target did not answer, or the call
// was refused before sending, or the caller gave up).
func verdict(o Outcome, r *Result, k answerKind) int {
	if r.Err != nil && (errors.Is(r.Err, ErrThrottled) || errors.Is(r.Err, ErrOpen) || errors.Is(r.Err, deadline.ErrInsufficientBudget)) {
		return uncounted
	}
	switch k {
	case relayed:
		return accepted
	case comeBack, tooMany:
		return refusedForLoad
	}
	if o == Success {
		return accepted
	}
	return uncounted
}
