package retry

import "time"

// Verdict is a classifier's judgement of one attempt.
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

// Decision is a classifier's verdict on one attempt, with the server's pushback.
type Decision struct {
	Verdict Verdict
	// Pushback is the wait the server asked for (Retry-After,
	// grpc-retry-pushback-ms, RetryInfo); it replaces the backoff when HasPushback
	// and it is positive. A pushback of zero (a Retry-After date in the past) waits
	// the backoff, so that clients do not all come back at once; a negative one
	// means "do not retry".
	Pushback    time.Duration
	HasPushback bool
	// Reason says why, in a few words; it appears in errors and events.
	Reason string

	// doNotRetry: the server said explicitly not to retry (a negative
	// grpc-retry-pushback-ms), as opposed to a pushback that was malformed. The stop
	// reason then says what the server meant: refused, or downstream_retried.
	doNotRetry bool
}

// Action is what the layer does after an attempt.
type Action uint8

const (
	// Return: the call ends with this attempt's result (answered, a failure not worth
	// retrying, or attempts exhausted).
	Return Action = iota
	// Retry: the layer waits Event.Wait, then makes another attempt.
	Retry
	// Stop: a retryable failure, but the layer gives up before its attempts ran out
	// (deadline rule, budget empty, pushback too long, context ended, inbound retry);
	// the call ends with the error in Event.Err.
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

// Event describes one attempt of a call, for [WithObserver].
type Event struct {
	// Attempt is the number of the attempt, 1 for the first.
	Attempt int
	// Took is how long the attempt ran.
	Took time.Duration
	// Decision is the classifier's verdict on the attempt.
	Decision Decision
	// Action is what the layer does next; Wait is the wait before the next attempt
	// when Action is Retry.
	Action Action
	Wait   time.Duration
	// Err is the attempt's error (for an HTTP answer with status ≥ 400, a
	// [*StatusError]; nil for other answers), or, when Action is Stop, the error the
	// call returns.
	Err error
}
