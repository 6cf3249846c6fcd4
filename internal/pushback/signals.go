package pushback

import (
	"net/http"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A failure answer carries up to four signals, each on its own header (gRPC: trailer
// or status detail), with one value each, so that a relay can keep every one of them:
//
//   - "do not retry": grpc-retry-pushback-ms negative ([Key], [DoNotRetry]), for the
//     retry layers;
//   - "come back in N": Retry-After (HTTP) or google.rpc.RetryInfo (gRPC), and a
//     positive grpc-retry-pushback-ms; read by [ComeBackHTTP] and [ComeBackGRPC]
//     whatever the retry layers are told;
//   - "the handler did not run" ([UnprocessedKey]): a toolkit server refused the
//     request before its handler ran (the guard, the admission queue), so a call that
//     may not run twice can still be sent again, like HTTP/2's REFUSED_STREAM (RFC
//     9113, section 8.7: "closed prior to any processing having occurred");
//   - "the failure is my downstream's" ([RelayedKey]): a server that is up relays
//     what its own downstream answered (deadlinekit.GRPCError, WriteHTTPError); the
//     caller's breaker counts the answer as neutral for that server.
//
// The last two are hop-local: a relay never copies them, since the relaying handler
// ran, and the relay marks its own answer.
const (
	// UnprocessedKey is the header (gRPC: trailer) of a refusal made before the
	// handler ran; its value is "1".
	UnprocessedKey = "deadlinekit-unprocessed"
	// RelayedKey is the header (gRPC: trailer) of a failure a server relays from its
	// downstream; its value is "1".
	RelayedKey = "deadlinekit-relayed"
	// Yes is the value of [UnprocessedKey] and [RelayedKey].
	Yes = "1"
)

// Unprocessed reports whether an answer's header or trailer values of
// [UnprocessedKey] say that the handler did not run.
func Unprocessed(vs []string) bool { return len(vs) > 0 && vs[0] == Yes }

// Relayed reports whether an answer's values of [RelayedKey] say that the failure is
// the answering server's downstream's.
func Relayed(vs []string) bool { return len(vs) > 0 && vs[0] == Yes }

// ComeBackHTTP returns the positive wait an HTTP answer asks for before the same
// request is worth sending again: Retry-After, else a positive
// grpc-retry-pushback-ms; 0 when it names none. It is read apart from "do not
// retry": a relay may say both (its own layers already retried, and its downstream
// will serve again in N).
func ComeBackHTTP(h http.Header, now time.Time) time.Duration {
	if v := h.Values(RetryAfterKey); len(v) > 0 {
		if d, err := ParseRetryAfter(v[0], now); err == nil && d > 0 {
			return d
		}
	}
	if v := h.Values(Key); len(v) > 0 {
		if d, err := ParseMs(v[0]); err == nil && d > 0 {
			return d
		}
	}
	return 0
}

// ComeBackGRPC is [ComeBackHTTP] for a gRPC answer: google.rpc.RetryInfo's
// retry_delay, else a positive grpc-retry-pushback-ms in the trailer.
func ComeBackGRPC(st *status.Status, trailer metadata.MD) time.Duration {
	if d, found, err := RetryInfoDelay(st); found && err == nil && d > 0 {
		return d
	}
	if v := trailer.Get(Key); len(v) > 0 {
		if d, err := ParseMs(v[0]); err == nil && d > 0 {
			return d
		}
	}
	return 0
}
