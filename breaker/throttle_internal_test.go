package breaker

import (
	"context"
	"errors"
	"net/http"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

func TestThrottleVerdicts(t *testing.T) {
	resp := func(code int, kv ...string) *http.Response {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return &http.Response{StatusCode: code, Header: h}
	}
	grpcErr := func(c codes.Code) error { return status.Error(c, "x") }
	relayed := metadata.Pairs(pushback.RelayedKey, pushback.Yes)
	cases := []struct {
		name string
		r    Result
		want int
	}{
		{"200", Result{Response: resp(200)}, accepted},
		{"404", Result{Response: resp(404)}, accepted},
		{"500", Result{Response: resp(500)}, accepted},
		{"429", Result{Response: resp(429)}, refusedForLoad},
		{"503 come back", Result{Response: resp(503, pushback.RetryAfterKey, "2")}, refusedForLoad},
		{"503 pushback ms", Result{Response: resp(503, pushback.Key, "200")}, refusedForLoad},
		{"503 plain", Result{Response: resp(503)}, uncounted},
		{"503 relayed", Result{Response: resp(503, pushback.RetryAfterKey, "2", pushback.RelayedKey, "1")}, accepted},
		{"502 relayed", Result{Response: resp(502, pushback.RelayedKey, "1")}, accepted},
		{"502", Result{Response: resp(502)}, uncounted},
		{"504 guard refusal", Result{Response: resp(504, pushback.Key, "-1")}, uncounted},
		{"connection refused", Result{Err: syscall.ECONNREFUSED}, uncounted},
		{"caller cancelled", Result{Err: context.Canceled}, uncounted},
		{"budget refusal beneath", Result{Err: &deadline.BudgetError{}}, uncounted},
		{"throttled beneath", Result{Err: (&ThrottledError{}).carried()}, uncounted},
		{"open beneath", Result{Err: (&OpenError{}).carried()}, uncounted},
		{"gRPC OK", Result{GRPC: true}, accepted},
		{"gRPC NOT_FOUND", Result{GRPC: true, Err: grpcErr(codes.NotFound)}, accepted},
		{"gRPC RESOURCE_EXHAUSTED", Result{GRPC: true, Err: grpcErr(codes.ResourceExhausted)}, refusedForLoad},
		{"gRPC RESOURCE_EXHAUSTED relayed", Result{GRPC: true, Err: grpcErr(codes.ResourceExhausted), Trailer: relayed}, accepted},
		{"gRPC UNAVAILABLE", Result{GRPC: true, Err: grpcErr(codes.Unavailable)}, uncounted},
		{"gRPC UNAVAILABLE come back", Result{GRPC: true, Err: grpcErr(codes.Unavailable), Trailer: metadata.Pairs(pushback.Key, "50")}, refusedForLoad},
		{"gRPC UNAVAILABLE relayed", Result{GRPC: true, Err: grpcErr(codes.Unavailable), Trailer: relayed}, accepted},
		{"gRPC DEADLINE_EXCEEDED refused", Result{GRPC: true, Err: grpcErr(codes.DeadlineExceeded), Trailer: metadata.Pairs(pushback.Key, "-1")}, uncounted},
		{"gRPC CANCELED", Result{GRPC: true, Err: grpcErr(codes.Canceled)}, uncounted},
	}
	for _, c := range cases {
		if got := verdict(Classify(c.r), &c.r, refusalOf(&c.r)); got != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, got, c.want)
		}
	}
	if !errors.Is((&ThrottledError{}).carried(), ErrThrottled) {
		t.Fatal("carried refusal")
	}
}

func TestThrottleLevelsInformEachOther(t *testing.T) {
	const sh, shp, cr, crp = 0, 1, 2, 3
	var own [levels]levelCounts
	own[cr] = levelCounts{requests: 10, accepts: 4, refusals: 6} // critical: 6 refused
	own[shp] = levelCounts{requests: 3, accepts: 3}              // sheddable-plus: all accepted
	own[sh] = levelCounts{requests: 5, refusals: 1}              // 4 refused locally, 1 by the server
	for _, c := range []struct {
		level             int
		requests, accepts int
	}{
		// Sheddable: its own, and the refusals of every level above it.
		{sh, 5 + 6, 0},
		// Sheddable-plus: its own, the refusals above, the accepts below (none).
		{shp, 3 + 6, 3},
		// Critical: its own, and sheddable-plus's accepts.
		{cr, 10 + 3, 4 + 3},
		// Critical-plus: nothing of its own, the accepts of every level below.
		{crp, 3 + 4, 3 + 4},
	} {
		if r, a := effective(&own, c.level); r != c.requests || a != c.accepts {
			t.Errorf("level %d: %d requests, %d accepts; want %d, %d", c.level, r, a, c.requests, c.accepts)
		}
	}
}
