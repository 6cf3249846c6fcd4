package propagate_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/propagate"
)

// Hostile inbound requests: what a caller can put in the deadline headers to make a
// server misbehave (panic, hold resources past its maximum, echo a megabyte back),
// and what the server does instead. Every server in these tests clamps to hostileMax
// and defaults to hostileDefault, so the applied budget says which rule fired.
const (
	hostileMax     = 10 * time.Second
	hostileDefault = 2 * time.Second
	mib            = 1 << 20
)

var hostileBase = []propagate.Option{propagate.WithMaxTimeout(hostileMax), propagate.WithDefaultTimeout(hostileDefault)}

// noDeadline as a wanted budget: the handler runs without a deadline.
const noDeadline = time.Duration(-1)

type hostileHTTPCase struct {
	name    string
	hdr     []string           // name, value, name, value…: repeats are duplicate headers
	opts    []propagate.Option // after hostileBase
	status  int                // 200: the handler ran
	budget  time.Duration      // for 200: the budget on the handler's context (noDeadline: none)
	source  string             // for 200 with a budget: Inbound.Source
	clamped bool
	noMax   bool // the case turns the clamp off: no maximum to hold
}

func dup(name, value string, n int) []string {
	h := make([]string, 0, 2*n)
	for range n {
		h = append(h, name, value)
	}
	return h
}

const (
	gt  = propagate.HeaderGRPCTimeout
	ct  = propagate.HeaderConnectTimeout
	env = propagate.HeaderEnvoyTimeout
)

var (
	trustEnvoy = []propagate.Option{propagate.WithTrustEnvoy()}
	ignoreBad  = []propagate.Option{propagate.WithIgnoreMalformed()}
	year       = 365 * 24 * time.Hour
)

// hostileHTTPCases is the table of hostile inbound HTTP requests, applied directly to
// the handler chain (no network: the header map holds exactly what is listed, which
// net/http on the wire would not always let through; see TestHostileHTTPWire).
var hostileHTTPCases = []hostileHTTPCase{
	// Baselines.
	{name: "no header: default budget", status: 200, budget: hostileDefault, source: "default"},
	{name: "plain grpc-timeout", hdr: []string{gt, "250m"}, status: 200, budget: 250 * time.Millisecond, source: "grpc-timeout"},

	// Budgets of years: clamped to the maximum.
	{name: "grpc-timeout 99999999H (11,400 years)", hdr: []string{gt, "99999999H"}, status: 200, budget: hostileMax, source: "grpc-timeout", clamped: true},
	{name: "grpc-timeout 2562048H (past time.Duration)", hdr: []string{gt, "2562048H"}, status: 200, budget: hostileMax, source: "grpc-timeout", clamped: true},
	{name: "grpc-timeout 99999999M", hdr: []string{gt, "99999999M"}, status: 200, budget: hostileMax, source: "grpc-timeout", clamped: true},
	{name: "grpc-timeout max below 8 digits of seconds", hdr: []string{gt, "31536000S"}, status: 200, budget: hostileMax, source: "grpc-timeout", clamped: true},
	{name: "Connect-Timeout-Ms 9999999999 (115 days)", hdr: []string{ct, "9999999999"}, status: 200, budget: hostileMax, source: "connect-timeout-ms", clamped: true},
	{name: "trusted Envoy 9999999999", hdr: []string{env, "9999999999"}, opts: trustEnvoy, status: 200, budget: hostileMax, source: "x-envoy-expected-rq-timeout-ms", clamped: true},
	{name: "clamp turned off: 99999999H saturates, no overflow", hdr: []string{gt, "99999999H"}, opts: []propagate.Option{propagate.WithMaxTimeout(0)}, status: 200, budget: 1<<63 - 1, source: "grpc-timeout", noMax: true},
	{name: "just under the maximum is kept", hdr: []string{gt, "9999m"}, status: 200, budget: 9999 * time.Millisecond, source: "grpc-timeout"},

	// Zero and negative budgets.
	{name: "grpc-timeout 0n", hdr: []string{gt, "0n"}, status: 504},
	{name: "grpc-timeout 0H", hdr: []string{gt, "0H"}, status: 504},
	{name: "grpc-timeout 00000000S", hdr: []string{gt, "00000000S"}, status: 504},
	{name: "Connect-Timeout-Ms 0", hdr: []string{ct, "0"}, status: 504},
	{name: "trusted Envoy 0", hdr: []string{env, "0"}, opts: trustEnvoy, status: 504},
	{name: "grpc-timeout 1n (expires at once, still positive)", hdr: []string{gt, "1n"}, status: 200, budget: time.Nanosecond, source: "grpc-timeout"},
	{name: "grpc-timeout -1S", hdr: []string{gt, "-1S"}, status: 400},
	{name: "grpc-timeout -0S", hdr: []string{gt, "-0S"}, status: 400},
	{name: "grpc-timeout +1S", hdr: []string{gt, "+1S"}, status: 400},
	{name: "Connect-Timeout-Ms -1", hdr: []string{ct, "-1"}, status: 400},
	{name: "trusted Envoy -5", hdr: []string{env, "-5"}, opts: trustEnvoy, status: 400},

	// Oversized values.
	{name: "grpc-timeout 9 digits", hdr: []string{gt, "123456789S"}, status: 400},
	{name: "Connect-Timeout-Ms 11 digits", hdr: []string{ct, "12345678901"}, status: 400},
	{name: "Connect-Timeout-Ms 20 digits (past int64)", hdr: []string{ct, "99999999999999999999"}, status: 400},
	{name: "grpc-timeout 4 KiB of digits", hdr: []string{gt, strings.Repeat("9", 4096) + "S"}, status: 400},
	{name: "grpc-timeout 1 MiB value", hdr: []string{gt, strings.Repeat("7", mib)}, status: 400},
	{name: "Connect-Timeout-Ms 1 MiB value", hdr: []string{ct, strings.Repeat("1", mib)}, status: 400},
	{name: "trusted Envoy 1 MiB value", hdr: []string{env, strings.Repeat("1", mib)}, opts: trustEnvoy, status: 400},
	{name: "untrusted Envoy 1 MiB value is not read", hdr: []string{env, strings.Repeat("1", mib)}, status: 200, budget: hostileDefault, source: "default"},

	// Unicode digits, NUL bytes and other bytes that are not ASCII digits.
	{name: "grpc-timeout full-width digits", hdr: []string{gt, "１００m"}, status: 400},
	{name: "grpc-timeout Arabic-Indic digits", hdr: []string{gt, "٣٠٠m"}, status: 400},
	{name: "grpc-timeout superscript two", hdr: []string{gt, "²S"}, status: 400},
	{name: "grpc-timeout Devanagari digits", hdr: []string{gt, "५S"}, status: 400},
	{name: "Connect-Timeout-Ms Arabic-Indic digits", hdr: []string{ct, "١٠٠"}, status: 400},
	{name: "Connect-Timeout-Ms mathematical bold digits", hdr: []string{ct, "𝟏𝟎𝟎"}, status: 400},
	{name: "grpc-timeout invalid UTF-8", hdr: []string{gt, "\xff\xfe1S"}, status: 400},
	{name: "grpc-timeout NUL inside", hdr: []string{gt, "1\x00S"}, status: 400},
	{name: "grpc-timeout NUL as unit", hdr: []string{gt, "1\x00"}, status: 400},
	{name: "grpc-timeout NUL only", hdr: []string{gt, "\x00"}, status: 400},
	{name: "Connect-Timeout-Ms NUL after digits", hdr: []string{ct, "100\x00"}, status: 400},
	{name: "grpc-timeout empty value", hdr: []string{gt, ""}, status: 400},
	{name: "grpc-timeout CRLF injection", hdr: []string{gt, "1S\r\nX-Evil: 1"}, status: 400},
	{name: "grpc-timeout fraction", hdr: []string{gt, "1.5S"}, status: 400},
	{name: "grpc-timeout lower-case s", hdr: []string{gt, "1s"}, status: 400},
	{name: "Connect-Timeout-Ms with unit", hdr: []string{ct, "100ms"}, status: 400},
	{name: "Connect-Timeout-Ms hex", hdr: []string{ct, "0x10"}, status: 400},
	{name: "Connect-Timeout-Ms exponent", hdr: []string{ct, "1e9"}, status: 400},

	// Many duplicate headers.
	{name: "grpc-timeout twice, same value", hdr: []string{gt, "1S", gt, "1S"}, status: 400},
	{name: "grpc-timeout twice, short then long", hdr: []string{gt, "1m", gt, "99999999H"}, status: 400},
	{name: "grpc-timeout 10,000 times", hdr: dup(gt, "1S", 10000), status: 400},
	{name: "Connect-Timeout-Ms 10,000 times", hdr: dup(ct, "100", 10000), status: 400},
	{name: "trusted Envoy twice", hdr: []string{env, "5", env, "9"}, opts: trustEnvoy, status: 400},
	{name: "grpc-timeout 10,000 times, ignore malformed: default", hdr: dup(gt, "1S", 10000), opts: ignoreBad, status: 200, budget: hostileDefault, source: "default"},
	{name: "10,000 unrelated headers", hdr: dup("X-Junk", "x", 10000), status: 200, budget: hostileDefault, source: "default"},

	// Conflicting headers: grpc-timeout, then Connect-Timeout-Ms, then (trusted) Envoy.
	{name: "grpc-timeout beats a longer Connect-Timeout-Ms", hdr: []string{gt, "100m", ct, "5000"}, status: 200, budget: 100 * time.Millisecond, source: "grpc-timeout"},
	{name: "grpc-timeout beats a shorter Connect-Timeout-Ms", hdr: []string{gt, "5S", ct, "100"}, status: 200, budget: 5 * time.Second, source: "grpc-timeout"},
	{name: "Connect-Timeout-Ms beats trusted Envoy", hdr: []string{ct, "100", env, "50"}, opts: trustEnvoy, status: 200, budget: 100 * time.Millisecond, source: "connect-timeout-ms"},
	{name: "all three, trusted Envoy", hdr: []string{env, "1", ct, "2", gt, "3m"}, opts: trustEnvoy, status: 200, budget: 3 * time.Millisecond, source: "grpc-timeout"},
	{name: "zero grpc-timeout is not rescued by Connect", hdr: []string{gt, "0n", ct, "5000"}, status: 504},
	{name: "years of grpc-timeout beside a small Connect: clamped", hdr: []string{gt, "99999999H", ct, "5"}, status: 200, budget: hostileMax, source: "grpc-timeout", clamped: true},
	{name: "malformed grpc-timeout, valid Connect: refused", hdr: []string{gt, "１S", ct, "100"}, status: 400},
	{name: "malformed grpc-timeout, valid Connect, ignore malformed", hdr: []string{gt, "１S", ct, "100"}, opts: ignoreBad, status: 200, budget: 100 * time.Millisecond, source: "connect-timeout-ms"},
	{name: "valid grpc-timeout, malformed Connect: Connect never read", hdr: []string{gt, "100m", ct, "junk"}, status: 200, budget: 100 * time.Millisecond, source: "grpc-timeout"},
	{name: "everything malformed, ignore malformed: default", hdr: []string{gt, "-1S", ct, "\x00", env, "١"}, opts: append([]propagate.Option{propagate.WithIgnoreMalformed()}, trustEnvoy...), status: 200, budget: hostileDefault, source: "default"},
	{name: "untrusted Envoy 0 beside nothing: default", hdr: []string{env, "0"}, status: 200, budget: hostileDefault, source: "default"},

	// A caller outside the trust boundary: every deadline header is ignored.
	{name: "untrusted caller asks for years", hdr: []string{gt, "99999999H", ct, "9999999999"}, opts: []propagate.Option{propagate.WithTrustHTTP(func(*http.Request) bool { return false })}, status: 200, budget: hostileDefault, source: "default"},
	{name: "untrusted caller sends malformed header: not refused", hdr: []string{gt, "-1S"}, opts: []propagate.Option{propagate.WithTrustHTTP(func(*http.Request) bool { return false })}, status: 200, budget: hostileDefault, source: "default"},
	{name: "untrusted caller sends zero: not refused", hdr: []string{gt, "0n"}, opts: []propagate.Option{propagate.WithTrustHTTP(func(*http.Request) bool { return false })}, status: 200, budget: hostileDefault, source: "default"},

	// Claims of a stream on a route the server did not declare streaming: what the
	// caller asks for is not what the route serves, so the unary rules hold.
	{name: "Accept text/event-stream: default", hdr: []string{"Accept", "text/event-stream"}, status: 200, budget: hostileDefault, source: "default"},
	{name: "Upgrade websocket: default", hdr: []string{"Upgrade", "websocket", "Connection", "Upgrade"}, status: 200, budget: hostileDefault, source: "default"},
	{name: "Upgrade of any other name: default", hdr: []string{"Upgrade", "TLS/1.2, IRC/6.9", "Connection", "Upgrade"}, status: 200, budget: hostileDefault, source: "default"},
	{name: "Connect streaming content type: default", hdr: []string{"Content-Type", "application/connect+proto"}, status: 200, budget: hostileDefault, source: "default"},
	{name: "Accept text/event-stream, years: clamped", hdr: []string{"Accept", "text/event-stream", gt, "99999999H"}, status: 200, budget: hostileMax, source: "grpc-timeout", clamped: true},
	{name: "Upgrade websocket, years: clamped", hdr: []string{"Upgrade", "websocket", gt, "99999999H"}, status: 200, budget: hostileMax, source: "grpc-timeout", clamped: true},
	{name: "Accept and Upgrade, years: clamped", hdr: []string{"Accept", "text/event-stream", "Upgrade", "websocket", "Connection", "Upgrade", gt, "99999999H"}, status: 200, budget: hostileMax, source: "grpc-timeout", clamped: true},
	{name: "Accept and Upgrade, Connect 115 days: clamped", hdr: []string{"Accept", "text/event-stream", "Upgrade", "websocket", ct, "9999999999"}, status: 200, budget: hostileMax, source: "connect-timeout-ms", clamped: true},
	{name: "Connect streaming content type, years: clamped", hdr: []string{"Content-Type", "application/connect+json", gt, "99999999H"}, status: 200, budget: hostileMax, source: "grpc-timeout", clamped: true},
	{name: "every claim, on a server with another route declared: clamped", hdr: []string{"Accept", "text/event-stream", "Upgrade", "websocket", "Content-Type", "application/connect+proto", gt, "99999999H"}, opts: []propagate.Option{propagate.WithStreamingHTTP(propagate.StreamingRoutes("/events"))}, status: 200, budget: hostileMax, source: "grpc-timeout", clamped: true},
	// The route declared streaming: the caller's deadline or none, bounded by the
	// stream maximum.
	{name: "declared stream route, no header: no deadline", opts: []propagate.Option{propagate.WithStreamingHTTP(propagate.StreamingRoutes("GET /hostile"))}, status: 200, budget: noDeadline},
	{name: "declared stream route, years, stream maximum: bounded", hdr: []string{gt, "99999999H"}, opts: []propagate.Option{propagate.WithStreamingHTTP(propagate.StreamingRoutes("GET /hostile")), propagate.WithMaxStreamTimeout(hostileMax / 2)}, status: 200, budget: hostileMax / 2, source: "grpc-timeout", clamped: true},

	// No default budget: a request without a header runs without a deadline.
	{name: "no default, no header: no deadline", opts: []propagate.Option{propagate.WithDefaultTimeout(0)}, status: 200, budget: noDeadline},
	{name: "no default, years: still clamped", hdr: []string{gt, "99999999H"}, opts: []propagate.Option{propagate.WithDefaultTimeout(0)}, status: 200, budget: hostileMax, source: "grpc-timeout", clamped: true},
}

// TestHostileHTTPInbound runs every hostile request of hostileHTTPCases against
// propagate.NewMiddleware, directly on the handler chain, under fake time so that the
// budget on the handler's context is exact. No case may panic, and no handler may
// get a deadline later than the server's maximum.
func TestHostileHTTPInbound(t *testing.T) {
	if len(hostileHTTPCases) < 40 {
		t.Fatalf("%d hostile cases; the issue asks for at least 40", len(hostileHTTPCases))
	}
	for _, tc := range hostileHTTPCases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := httptest.NewRequest(http.MethodGet, "/hostile", nil)
				for i := 0; i+1 < len(tc.hdr); i += 2 {
					k := textproto.CanonicalMIMEHeaderKey(tc.hdr[i])
					r.Header[k] = append(r.Header[k], tc.hdr[i+1])
				}
				var ran bool
				var dl time.Time
				var has bool
				var in propagate.Inbound
				h := propagate.NewMiddleware(append(append([]propagate.Option{}, hostileBase...), tc.opts...)...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					ran = true
					dl, has = r.Context().Deadline()
					in, _ = propagate.InboundFromContext(r.Context())
				}))
				start := time.Now()
				rec := httptest.NewRecorder()
				func() {
					defer func() {
						if p := recover(); p != nil {
							t.Fatalf("panic: %v", p)
						}
					}()
					h.ServeHTTP(rec, r)
				}()
				checkHostileOutcome(t, tc, rec, ran, start, dl, has, in)
			})
		})
	}
}

func checkHostileOutcome(t *testing.T, tc hostileHTTPCase, rec *httptest.ResponseRecorder, ran bool, start, dl time.Time, has bool, in propagate.Inbound) {
	t.Helper()
	if rec.Code != tc.status {
		t.Fatalf("status %d (%.100q); want %d", rec.Code, rec.Body.String(), tc.status)
	}
	if tc.status != http.StatusOK {
		if ran {
			t.Fatal("the handler ran")
		}
		// The refusal names the problem without echoing a megabyte back.
		if n := rec.Body.Len(); n > 256 {
			t.Errorf("refusal body of %d bytes", n)
		}
		if tc.status == http.StatusBadRequest && !strings.Contains(rec.Body.String(), "-Timeout") {
			t.Errorf("400 body %q does not name the header", rec.Body.String())
		}
		return
	}
	if !ran {
		t.Fatal("the handler did not run")
	}
	if tc.budget == noDeadline {
		if has {
			t.Errorf("handler got a deadline %v ahead; want none", dl.Sub(start))
		}
		return
	}
	if !has {
		t.Fatal("handler got no deadline")
	}
	if !tc.noMax && dl.Sub(start) > hostileMax {
		t.Fatalf("handler deadline %v ahead: past the server's maximum %v", dl.Sub(start), hostileMax)
	}
	if tc.noMax {
		if !dl.After(start) {
			t.Fatalf("handler deadline %v is not after arrival", dl)
		}
	} else if got := dl.Sub(start); got != tc.budget {
		t.Errorf("handler deadline %v ahead; want %v", got, tc.budget)
	}
	if want := (propagate.Inbound{Budget: tc.budget, Source: tc.source, Clamped: tc.clamped}); in != want {
		t.Errorf("Inbound %+v; want %+v", in, want)
	}
}

type hostileGRPCCase struct {
	name    string
	timeout time.Duration // deadline grpc-go set from grpc-timeout; 0: none
	md      []string      // incoming metadata pairs
	opts    []propagate.Option
	code    codes.Code
	budget  time.Duration // for OK: the handler's budget (noDeadline: none)
	source  string
	clamped bool
}

// hostileGRPCCases: grpc-go parses grpc-timeout itself (and refuses a malformed one
// with codes.Internal before any interceptor runs; see reliability's wire test), so
// what reaches the interceptors is a deadline on the context plus metadata.
var hostileGRPCCases = []hostileGRPCCase{
	{name: "no deadline: default", code: codes.OK, budget: hostileDefault, source: "default"},
	{name: "deadline of 100 years: clamped", timeout: 100 * year, code: codes.OK, budget: hostileMax, source: "grpc-timeout", clamped: true},
	{name: "deadline of MaxInt64: clamped", timeout: 1<<63 - 1, code: codes.OK, budget: hostileMax, source: "grpc-timeout", clamped: true},
	{name: "deadline already passed", timeout: -time.Hour, code: codes.DeadlineExceeded},
	{name: "deadline 1ns in the past", timeout: -time.Nanosecond, code: codes.DeadlineExceeded},
	{name: "trusted Envoy years", md: []string{"x-envoy-expected-rq-timeout-ms", "9999999999"}, opts: trustEnvoy, code: codes.OK, budget: hostileMax, source: "x-envoy-expected-rq-timeout-ms", clamped: true},
	{name: "trusted Envoy 0", md: []string{"x-envoy-expected-rq-timeout-ms", "0"}, opts: trustEnvoy, code: codes.DeadlineExceeded},
	{name: "trusted Envoy negative", md: []string{"x-envoy-expected-rq-timeout-ms", "-1"}, opts: trustEnvoy, code: codes.InvalidArgument},
	{name: "trusted Envoy unicode digits", md: []string{"x-envoy-expected-rq-timeout-ms", "１٢३"}, opts: trustEnvoy, code: codes.InvalidArgument},
	{name: "trusted Envoy NUL", md: []string{"x-envoy-expected-rq-timeout-ms", "5\x00"}, opts: trustEnvoy, code: codes.InvalidArgument},
	{name: "trusted Envoy 1 MiB", md: []string{"x-envoy-expected-rq-timeout-ms", strings.Repeat("9", mib)}, opts: trustEnvoy, code: codes.InvalidArgument},
	{name: "trusted Envoy 1,000 times", md: dup("x-envoy-expected-rq-timeout-ms", "5", 1000), opts: trustEnvoy, code: codes.InvalidArgument},
	{name: "trusted Envoy malformed, ignore malformed", md: []string{"x-envoy-expected-rq-timeout-ms", "-1"}, opts: append([]propagate.Option{propagate.WithIgnoreMalformed()}, trustEnvoy...), code: codes.OK, budget: hostileDefault, source: "default"},
	{name: "untrusted Envoy years: not read", md: []string{"x-envoy-expected-rq-timeout-ms", "9999999999"}, code: codes.OK, budget: hostileDefault, source: "default"},
	{name: "deadline beats trusted Envoy", timeout: time.Second, md: []string{"x-envoy-expected-rq-timeout-ms", "5"}, opts: trustEnvoy, code: codes.OK, budget: time.Second, source: "grpc-timeout"},
	{name: "expired deadline is not rescued by Envoy", timeout: -time.Second, md: []string{"x-envoy-expected-rq-timeout-ms", "5000"}, opts: trustEnvoy, code: codes.DeadlineExceeded},
	{name: "grpc-timeout smuggled in metadata is not read", md: []string{"grpc-timeout", "99999999H"}, code: codes.OK, budget: hostileDefault, source: "default"},
	{name: "connect-timeout-ms in metadata is not read", md: []string{"connect-timeout-ms", "9999999999"}, code: codes.OK, budget: hostileDefault, source: "default"},
	{name: "untrusted caller: Envoy ignored", md: []string{"x-envoy-expected-rq-timeout-ms", "0"}, opts: append([]propagate.Option{propagate.WithTrustGRPC(func(context.Context) bool { return false })}, trustEnvoy...), code: codes.OK, budget: hostileDefault, source: "default"},
	{name: "untrusted caller: its deadline is still clamped", timeout: 100 * year, opts: []propagate.Option{propagate.WithTrustGRPC(func(context.Context) bool { return false })}, code: codes.OK, budget: hostileMax, source: "grpc-timeout", clamped: true},
	{name: "no default, no deadline: none", opts: []propagate.Option{propagate.WithDefaultTimeout(0)}, code: codes.OK, budget: noDeadline},
}

// TestHostileGRPCInbound runs hostileGRPCCases through the unary and the stream server
// interceptors, under fake time.
func TestHostileGRPCInbound(t *testing.T) {
	for _, tc := range hostileGRPCCases {
		for _, kind := range []string{"unary", "stream"} {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ctx := context.Background()
					if len(tc.md) > 0 {
						ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(tc.md...))
					}
					if tc.timeout != 0 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, tc.timeout)
						defer cancel()
					}
					start := time.Now()
					var ran, has bool
					var dl time.Time
					var in propagate.Inbound
					observe := func(ctx context.Context) {
						ran = true
						dl, has = ctx.Deadline()
						in, _ = propagate.InboundFromContext(ctx)
					}
					opts := append(append([]propagate.Option{}, hostileBase...), tc.opts...)
					budget, source, clamped := tc.budget, tc.source, tc.clamped
					if kind == "stream" {
						// Streams have no default budget and are not clamped by
						// the unary maximum: the stream maximum does both.
						opts = append(opts, propagate.WithMaxStreamTimeout(hostileMax))
						if budget == noDeadline || source == propagate.SourceDefault {
							budget, source, clamped = hostileMax, propagate.SourceDefault, false
						}
					}
					var err error
					func() {
						defer func() {
							if p := recover(); p != nil {
								t.Fatalf("panic: %v", p)
							}
						}()
						if kind == "unary" {
							_, err = propagate.UnaryServerInterceptor(opts...)(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/svc/M"},
								func(ctx context.Context, _ any) (any, error) { observe(ctx); return nil, nil })
						} else {
							err = propagate.StreamServerInterceptor(opts...)(nil, &fakeServerStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: "/svc/S"},
								func(_ any, ss grpc.ServerStream) error { observe(ss.Context()); return nil })
						}
					}()
					if status.Code(err) != tc.code {
						t.Fatalf("code %v (%v); want %v", status.Code(err), err, tc.code)
					}
					if tc.code != codes.OK {
						if ran {
							t.Fatal("the handler ran")
						}
						if n := len(status.Convert(err).Message()); n > 256 {
							t.Errorf("status message of %d bytes", n)
						}
						return
					}
					if budget == noDeadline {
						if has {
							t.Errorf("handler got a deadline; want none")
						}
						return
					}
					if !has || dl.Sub(start) > hostileMax {
						t.Fatalf("handler deadline %v ahead (has %v): past the server's maximum %v", dl.Sub(start), has, hostileMax)
					}
					if got := dl.Sub(start); got != budget {
						t.Errorf("handler deadline %v ahead; want %v", got, budget)
					}
					if want := (propagate.Inbound{Budget: budget, Source: source, Clamped: clamped}); in != want {
						t.Errorf("Inbound %+v; want %+v", in, want)
					}
				})
			})
		}
	}
}

// hostileWireCase is a request written byte for byte on a TCP connection, for what
// http.Client refuses to send (NUL, bare CR, folded lines) or what only net/http's
// own parsing decides (size limits, whitespace, header-name case).
type hostileWireCase struct {
	name    string
	headers string // raw header lines, each ending in \r\n
	status  int
	budget  time.Duration // for 200: Inbound.Budget
	byHTTP  bool          // the answer comes from net/http, before the middleware
}

func hostileWireCases() []hostileWireCase {
	line := func(k, v string) string { return k + ": " + v + "\r\n" }
	return []hostileWireCase{
		{name: "baseline", headers: line("Grpc-Timeout", "250m"), status: 200, budget: 250 * time.Millisecond},
		// net/http's default MaxHeaderBytes is 1 MiB, and it reads 4 KiB more than that
		// before it gives up: a value of exactly 1 MiB reaches the middleware, which
		// refuses it with a short body; 8 KiB more and net/http answers 431 itself.
		{name: "1 MiB grpc-timeout value", headers: line("Grpc-Timeout", strings.Repeat("9", mib)), status: 400},
		{name: "1 MiB + 8 KiB grpc-timeout value", headers: line("Grpc-Timeout", strings.Repeat("9", mib+8<<10)), status: 431, byHTTP: true},
		{name: "1 MiB Connect-Timeout-Ms value", headers: line("Connect-Timeout-Ms", strings.Repeat("1", mib)), status: 400},
		{name: "10,000 duplicate grpc-timeout", headers: strings.Repeat(line("Grpc-Timeout", "1S"), 10000), status: 400},
		{name: "100,000 duplicate grpc-timeout (1.8 MB)", headers: strings.Repeat(line("Grpc-Timeout", "1S"), 100000), status: 431, byHTTP: true},
		{name: "same header in three cases is one header, repeated", headers: line("grpc-timeout", "1S") + line("GRPC-TIMEOUT", "2S") + line("Grpc-Timeout", "3S"), status: 400},
		{name: "NUL in the value", headers: line("Grpc-Timeout", "1\x00S"), status: 400, byHTTP: true},
		{name: "NUL in the name", headers: line("Grpc-Time\x00out", "1S"), status: 400, byHTTP: true},
		{name: "bare CR in the value", headers: line("Grpc-Timeout", "1\rS"), status: 400, byHTTP: true},
		// net/textproto joins a folded line to the one before with a space: "1 S".
		{name: "obsolete line folding", headers: "Grpc-Timeout: 1\r\n S\r\n", status: 400},
		{name: "space before the colon", headers: "Grpc-Timeout : 1S\r\n", status: 400, byHTTP: true},
		// net/http trims the whitespace around a value: " 1S " arrives as "1S".
		{name: "whitespace around the value is trimmed", headers: line("Grpc-Timeout", " \t1S \t"), status: 200, budget: time.Second},
		{name: "UTF-8 full-width digits on the wire", headers: line("Grpc-Timeout", "１S"), status: 400},
		{name: "Latin-1 byte on the wire", headers: line("Connect-Timeout-Ms", "1\xb2"), status: 400},
		{name: "years on the wire", headers: line("Grpc-Timeout", "99999999H"), status: 200, budget: hostileMax},
		{name: "zero on the wire", headers: line("Connect-Timeout-Ms", "0"), status: 504},
		{name: "years with Accept and Upgrade on the wire", headers: line("Accept", "text/event-stream") + line("Upgrade", "websocket") + line("Grpc-Timeout", "99999999H"), status: 200, budget: hostileMax},
	}
}

// TestHostileHTTPWire sends hostileWireCases over a real loopback connection to an
// httptest server running propagate.NewMiddleware, to see what net/http's own limits
// do before the middleware and what reaches it.
func TestHostileHTTPWire(t *testing.T) {
	type reached struct {
		budget time.Duration
		ahead  time.Duration // handler's deadline minus the time it ran
	}
	seenc := make(chan reached, 1)
	srv := httptest.NewServer(propagate.NewMiddleware(hostileBase...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, _ := propagate.InboundFromContext(r.Context())
		dl, _ := r.Context().Deadline()
		select {
		case seenc <- reached{in.Budget, time.Until(dl)}:
		default: // a failed case left its reading unread: never block the server
		}
	})))
	defer srv.Close()
	for _, tc := range hostileWireCases() {
		t.Run(tc.name, func(t *testing.T) {
			code, body := rawHTTP(t, srv.Listener.Addr().String(), "GET /hostile HTTP/1.1\r\nHost: x\r\n"+tc.headers+"Connection: close\r\n\r\n")
			if code != tc.status {
				t.Fatalf("status %d (%.100q); want %d", code, body, tc.status)
			}
			var got *reached
			select {
			case r := <-seenc:
				got = &r
			default:
			}
			if tc.status != http.StatusOK {
				if got != nil {
					t.Fatal("the handler ran")
				}
				if len(body) > 256 {
					t.Errorf("refusal body of %d bytes", len(body))
				}
				fromUs := strings.HasPrefix(body, "propagate: ")
				if fromUs == tc.byHTTP {
					t.Errorf("answer %q: from the middleware %v; want %v", body, fromUs, !tc.byHTTP)
				}
				return
			}
			if got == nil {
				t.Fatal("the handler did not run")
			}
			if got.budget != tc.budget {
				t.Errorf("budget %v; want %v", got.budget, tc.budget)
			}
			if got.ahead > hostileMax {
				t.Errorf("handler deadline %v ahead: past the server's maximum %v", got.ahead, hostileMax)
			}
		})
	}
}

// rawHTTP writes req on a new connection to addr and reads one response. The write
// runs beside the read: a server that answers before reading everything (431) must
// not block the test.
func rawHTTP(t *testing.T, addr, req string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		_, _ = io.WriteString(c, req) // the server may stop reading: its answer is what counts
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.Close()
	<-wrote
	return resp.StatusCode, string(b)
}

// ExampleNewMiddleware_hostile shows the answer to a malformed header: the value is
// quoted, shortened, and the header named.
func ExampleNewMiddleware_hostile() {
	h := propagate.NewMiddleware()(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Grpc-Timeout", strings.Repeat("9", 1<<20))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	fmt.Print(rec.Code, " ", rec.Body.String())
	// Output: 400 propagate: malformed Grpc-Timeout header "99999999999999999999999999999999…": more than 8 digits
}
