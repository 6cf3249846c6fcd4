package retry

import "time"

// Verdict is the judgement of one attempt: by the layer, then by the user's
// classifier ([WithClassifier]) when there is one.
type Verdict uint8

const (
	// Answered: the downstream answered, and the answer is final. It includes
	// answers the caller treats as errors (HTTP 404, gRPC NOT_FOUND): they prove the
	// downstream is up, and they deposit into the [Budget].
	Answered Verdict = iota
	// Failed: the attempt failed and another attempt would not help, or must not be
	// made (a write that may have been done, a pushback that says "do not retry").
	// The failure is returned as is.
	Failed
	// Retryable: the attempt failed in a way another attempt may fix.
	Retryable
)

func (v Verdict) String() string {
	switch v {
	case Answered:
		return "answered"
	case Failed:
		return "failed"
	case Retryable:
		return "retryable"
	}
	return "verdict(?)"
}

// Action is what the layer does after an attempt.
type Action uint8

const (
	// Return: the call ends with this attempt's result (answered, a failure not worth
	// retrying, or attempts exhausted).
	Return Action = iota
	// Retry: the layer waits Event.Wait, then makes another attempt.
	Retry
	// Stop: a retryable failure, but the layer gives up before its attempts ran out;
	// Event.Err is a [*StopError] saying why. The call ends with it, or over HTTP
	// with the attempt's response ([NewTransport]).
	Stop
)

func (a Action) String() string {
	switch a {
	case Return:
		return "return"
	case Retry:
		return "retry"
	case Stop:
		return "stop"
	}
	return "action(?)"
}

// Event describes one attempt of a call, whatever the protocol: what happened, the
// verdict on it, and what the layer does next. A classifier ([WithClassifier]) sees
// it before the layer acts (Verdict and Reason are then the layer's own judgement,
// Action and Wait not yet set); observers ([WithObserver]) see it after.
type Event struct {
	// Attempt is the number of the attempt, 1 for the first.
	Attempt int
	// Method is the HTTP method, or the full gRPC method name ("/pkg.Service/Method").
	Method string
	// Took is how long the attempt ran, measured only when an observer is set.
	Took time.Duration
	// Err is the attempt's failure: the transport's error, the gRPC status error, or
	// for an HTTP answer with status ≥ 400 a [*StatusError]; nil for other answers.
	// When Action is Stop, it is the layer's [*StopError], wrapping that failure.
	Err error
	// Idempotent reports whether the call may safely run twice: an idempotent HTTP
	// method (RFC 9110: GET, HEAD, OPTIONS, TRACE, PUT, DELETE) or a gRPC method
	// declared idempotent ([WithIdempotentMethods], or idempotency_level
	// NO_SIDE_EFFECTS or IDEMPOTENT in its descriptor), or a call carrying an
	// idempotency key. For gRPC it is filled in for failed attempts only.
	Idempotent bool
	// TimedOut reports whether this layer's per-attempt timeout
	// ([WithAttemptTimeout]) ended the attempt while the call's context was still live.
	TimedOut bool
	// Verdict is the judgement of the attempt, and Reason says why, in a few words.
	Verdict Verdict
	Reason  string
	// Action is what the layer does next; Wait is the wait before the next attempt
	// when Action is Retry.
	Action Action
	Wait   time.Duration
}

// decision is the layer's judgement of one attempt, with the server's pushback.
type decision struct {
	verdict Verdict
	reason  string
	// pushback is the wait the server asked for (Retry-After,
	// grpc-retry-pushback-ms, RetryInfo); it replaces the backoff when hasPushback
	// and it is positive. A pushback of zero (a Retry-After date in the past) waits
	// the backoff, so that clients do not all come back at once; a negative one
	// means "do not retry".
	pushback    time.Duration
	hasPushback bool
	// doNotRetry: the server said explicitly not to retry (a negative
	// grpc-retry-pushback-ms), as opposed to a pushback that was malformed. The stop
	// reason then says what the server meant: refused, or downstream_retried.
	doNotRetry bool
	// conflict: a server's deduplication said the first request with the call's key
	// still runs (409 / ABORTED with a come-back, the pushback).
	conflict bool
}
