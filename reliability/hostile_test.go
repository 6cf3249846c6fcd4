package reliability_test

import (
	"context"
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
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// The server stack under test, outermost first: propagate (clamp to hostileMax,
// default hostileDefault) → retry server side → shortcircuit (floor hostileFloor) →
// handler.
const (
	hostileMax     = 10 * time.Second
	hostileDefault = 2 * time.Second
	hostileFloor   = 5 * time.Millisecond
	hostileMiB     = 1 << 20
)

func hostileOpts(extra ...propagate.Option) []propagate.Option {
	return append([]propagate.Option{propagate.WithMaxTimeout(hostileMax), propagate.WithDefaultTimeout(hostileDefault),
		propagate.WithMaxStreamTimeout(hostileMax)}, extra...)
}

// hostileHTTPStack wraps h in the full HTTP server stack.
func hostileHTTPStack(h http.Handler, counter *shortcircuit.Counter, extra ...propagate.Option) http.Handler {
	guard := shortcircuit.NewMiddleware(shortcircuit.WithFloor(hostileFloor), shortcircuit.WithObserver(counter.Observe))
	return propagate.NewMiddleware(hostileOpts(extra...)...)(retry.NewMiddleware()(guard(h)))
}

// hostileSeen is what the handler at the bottom of the stack observed.
type hostileSeen struct {
	ran          bool
	deadline     time.Time
	hasDeadline  bool
	servingRetry bool
	keys         []string // Idempotency-Key values, as the handler got them
	attempts     []string // grpc-previous-rpc-attempts values, as the handler got them
}

const (
	hostileAtt = "grpc-previous-rpc-attempts"
	hostileKey = "Idempotency-Key"
	hostileGt  = propagate.HeaderGRPCTimeout
	hostileCt  = propagate.HeaderConnectTimeout
)

func hostileDup(name, value string, n int) []string {
	h := make([]string, 0, 2*n)
	for range n {
		h = append(h, name, value)
	}
	return h
}

type hostileStackCase struct {
	name    string
	hdr     []string
	opts    []propagate.Option
	status  int
	refuser string        // for a refusal: "propagate" or "shortcircuit"
	budget  time.Duration // for 200: the handler's budget
	serving bool          // for 200: retry.ServingRetry on the handler's context
	keys    []string      // for 200: Idempotency-Key values the handler must see (nil: none)
}

// hostileStackCases are hostile inbound requests for the whole HTTP server stack. The
// deadline cases check that the layers agree (which one refuses, what budget the
// handler gets); the grpc-previous-rpc-attempts cases pin how the retry server side
// reads a hostile count (strconv.Atoi of the first value, trimmed; anything it cannot
// read, or below 1, is "not a retry"); the Idempotency-Key cases show that no server
// layer reads, rewrites or refuses the key: it reaches the handler byte for byte, and
// deduplicating on it is the application's business.
var hostileStackCases = []hostileStackCase{
	// Deadlines through the stack.
	{name: "years: clamped, admitted", hdr: []string{hostileGt, "99999999H"}, status: 200, budget: hostileMax},
	{name: "below the floor: shortcircuit refuses", hdr: []string{hostileGt, "3m"}, status: 504, refuser: "shortcircuit"},
	{name: "just at the floor: admitted", hdr: []string{hostileGt, "5m"}, status: 200, budget: hostileFloor},
	{name: "zero: propagate refuses, guard never sees it", hdr: []string{hostileGt, "0n"}, status: 504, refuser: "propagate"},
	{name: "1 MiB value: 400", hdr: []string{hostileGt, strings.Repeat("9", hostileMiB)}, status: 400, refuser: "propagate"},
	{name: "10,000 duplicates: 400", hdr: hostileDup(hostileGt, "1S", 10000), status: 400, refuser: "propagate"},
	{name: "unicode digits: 400", hdr: []string{hostileCt, "١٠٠"}, status: 400, refuser: "propagate"},
	{name: "conflict: short grpc-timeout beats long Connect, then the floor", hdr: []string{hostileGt, "2m", hostileCt, "5000"}, status: 504, refuser: "shortcircuit"},
	{name: "no header: default", status: 200, budget: hostileDefault},

	// grpc-previous-rpc-attempts.
	{name: "attempts 1: serving a retry", hdr: []string{hostileAtt, "1"}, status: 200, budget: hostileDefault, serving: true},
	{name: "attempts 0", hdr: []string{hostileAtt, "0"}, status: 200, budget: hostileDefault},
	{name: "attempts -1", hdr: []string{hostileAtt, "-1"}, status: 200, budget: hostileDefault},
	{name: "attempts MinInt64", hdr: []string{hostileAtt, "-9223372036854775808"}, status: 200, budget: hostileDefault},
	{name: "attempts MaxInt64", hdr: []string{hostileAtt, "9223372036854775807"}, status: 200, budget: hostileDefault, serving: true},
	{name: "attempts past int64: unreadable, not a retry", hdr: []string{hostileAtt, "99999999999999999999"}, status: 200, budget: hostileDefault},
	{name: "attempts 1 MiB of digits", hdr: []string{hostileAtt, strings.Repeat("9", hostileMiB)}, status: 200, budget: hostileDefault},
	{name: "attempts non-numeric", hdr: []string{hostileAtt, "many"}, status: 200, budget: hostileDefault},
	{name: "attempts empty", hdr: []string{hostileAtt, ""}, status: 200, budget: hostileDefault},
	{name: "attempts with spaces: trimmed", hdr: []string{hostileAtt, " 3 "}, status: 200, budget: hostileDefault, serving: true},
	{name: "attempts +1: Atoi takes the sign", hdr: []string{hostileAtt, "+1"}, status: 200, budget: hostileDefault, serving: true},
	{name: "attempts hex", hdr: []string{hostileAtt, "0x1"}, status: 200, budget: hostileDefault},
	{name: "attempts full-width digit", hdr: []string{hostileAtt, "１"}, status: 200, budget: hostileDefault},
	{name: "attempts NUL after the digit", hdr: []string{hostileAtt, "1\x00"}, status: 200, budget: hostileDefault},
	{name: "attempts comma list", hdr: []string{hostileAtt, "1, 2"}, status: 200, budget: hostileDefault},
	{name: "attempts repeated, first 0: first value wins", hdr: []string{hostileAtt, "0", hostileAtt, "7"}, status: 200, budget: hostileDefault},
	{name: "attempts repeated, first 7", hdr: []string{hostileAtt, "7", hostileAtt, "0"}, status: 200, budget: hostileDefault, serving: true},
	{name: "attempts 10,000 times", hdr: hostileDup(hostileAtt, "1", 10000), status: 200, budget: hostileDefault, serving: true},
	{name: "attempts from an untrusted caller: stripped", hdr: []string{hostileAtt, "1"}, opts: []propagate.Option{propagate.WithTrustHTTP(func(*http.Request) bool { return false })}, status: 200, budget: hostileDefault},

	// Idempotency-Key: passed through untouched.
	{name: "key empty", hdr: []string{hostileKey, ""}, status: 200, budget: hostileDefault, keys: []string{""}},
	{name: "key 64 KiB", hdr: []string{hostileKey, strings.Repeat("k", 64<<10)}, status: 200, budget: hostileDefault, keys: []string{strings.Repeat("k", 64<<10)}},
	{name: "key unicode", hdr: []string{hostileKey, "ключ-🔑"}, status: 200, budget: hostileDefault, keys: []string{"ключ-🔑"}},
	{name: "key NUL inside", hdr: []string{hostileKey, "a\x00b"}, status: 200, budget: hostileDefault, keys: []string{"a\x00b"}},
	{name: "key CRLF inside", hdr: []string{hostileKey, "a\r\nX-Evil: 1"}, status: 200, budget: hostileDefault, keys: []string{"a\r\nX-Evil: 1"}},
	{name: "key twice, different values: both, in order", hdr: []string{hostileKey, "a", hostileKey, "b"}, status: 200, budget: hostileDefault, keys: []string{"a", "b"}},
	{name: "key beside a retry count", hdr: []string{hostileKey, "k1", hostileAtt, "2"}, status: 200, budget: hostileDefault, serving: true, keys: []string{"k1"}},
	{name: "key on a refused request", hdr: []string{hostileKey, "k1", hostileGt, "1m"}, status: 504, refuser: "shortcircuit"},
}

// TestHostileHTTPStack runs hostileStackCases through propagate → retry → shortcircuit on
// the handler chain, under fake time.
func TestHostileHTTPStack(t *testing.T) {
	for _, tc := range hostileStackCases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := httptest.NewRequest(http.MethodPost, "/hostile", nil)
				for i := 0; i+1 < len(tc.hdr); i += 2 {
					k := textproto.CanonicalMIMEHeaderKey(tc.hdr[i])
					r.Header[k] = append(r.Header[k], tc.hdr[i+1])
				}
				var s hostileSeen
				var counter shortcircuit.Counter
				h := hostileHTTPStack(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					s.ran = true
					s.deadline, s.hasDeadline = r.Context().Deadline()
					s.servingRetry = retry.ServingRetry(r.Context())
					s.keys = r.Header.Values(hostileKey)
					s.attempts = r.Header.Values(hostileAtt)
				}), &counter, tc.opts...)
				start := time.Now()
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				if rec.Code != tc.status {
					t.Fatalf("status %d (%.100q); want %d", rec.Code, rec.Body.String(), tc.status)
				}
				st := counter.Stats()
				if tc.status != 200 {
					if s.ran {
						t.Fatal("the handler ran")
					}
					if rec.Body.Len() > 256 {
						t.Errorf("refusal body of %d bytes", rec.Body.Len())
					}
					wantRefused := uint64(0)
					if tc.refuser == "shortcircuit" {
						wantRefused = 1
					}
					if st.Refused() != wantRefused || st.Admitted != 0 {
						t.Errorf("guard stats %+v; want %d refused by the guard, none admitted", st, wantRefused)
					}
					return
				}
				if !s.ran || st.Admitted != 1 {
					t.Fatalf("handler ran %v, guard stats %+v", s.ran, st)
				}
				if !s.hasDeadline || s.deadline.Sub(start) > hostileMax {
					t.Fatalf("handler deadline %v ahead: past the server's maximum", s.deadline.Sub(start))
				}
				if got := s.deadline.Sub(start); got != tc.budget {
					t.Errorf("handler budget %v; want %v", got, tc.budget)
				}
				if s.servingRetry != tc.serving {
					t.Errorf("ServingRetry %v; want %v (attempts header %.40q)", s.servingRetry, tc.serving, s.attempts)
				}
				if strings.Join(s.keys, "|") != strings.Join(tc.keys, "|") || len(s.keys) != len(tc.keys) {
					t.Errorf("handler saw keys %.60q; want %.60q", s.keys, tc.keys)
				}
			})
		})
	}
}

// grpcStack starts a loopback gRPC server with the full stack and returns its
// address and a channel on which the handler reports what it saw.
type hostileGRPCSeen struct {
	ahead    time.Duration // handler's deadline minus the time it ran (0: none)
	budget   time.Duration
	serving  bool
	keys     []string
	attempts []string
}

type hostileService struct {
	testgrpc.UnimplementedTestServiceServer
	seen chan hostileGRPCSeen
}

func (s *hostileService) record(ctx context.Context) {
	var g hostileGRPCSeen
	if dl, ok := ctx.Deadline(); ok {
		g.ahead = time.Until(dl)
	}
	in, _ := propagate.InboundFromContext(ctx)
	g.budget = in.Budget
	g.serving = retry.ServingRetry(ctx)
	g.keys = metadata.ValueFromIncomingContext(ctx, "idempotency-key")
	g.attempts = metadata.ValueFromIncomingContext(ctx, "grpc-previous-rpc-attempts")
	select {
	case s.seen <- g:
	default:
	}
}

func (s *hostileService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.record(ctx)
	return &testgrpc.SimpleResponse{}, nil
}

func (s *hostileService) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, ss testgrpc.TestService_StreamingOutputCallServer) error {
	s.record(ss.Context())
	return nil
}

func startHostileGRPCStack(t *testing.T, counter *shortcircuit.Counter) (string, *hostileService) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := hostileOpts(propagate.WithTrustEnvoy())
	gs := grpc.NewServer(
		grpc.ChainUnaryInterceptor(
			propagate.UnaryServerInterceptor(opts...),
			retry.UnaryServerInterceptor(),
			shortcircuit.UnaryServerInterceptor(shortcircuit.WithFloor(hostileFloor), shortcircuit.WithObserver(counter.Observe))),
		grpc.ChainStreamInterceptor(
			propagate.StreamServerInterceptor(opts...),
			shortcircuit.StreamServerInterceptor(shortcircuit.WithFloor(hostileFloor), shortcircuit.WithObserver(counter.Observe))),
	)
	svc := &hostileService{seen: make(chan hostileGRPCSeen, 1)}
	testgrpc.RegisterTestServiceServer(gs, svc)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-served })
	return lis.Addr().String(), svc
}

func (s *hostileService) take() (hostileGRPCSeen, bool) {
	select {
	case g := <-s.seen:
		return g, true
	default:
		return hostileGRPCSeen{}, false
	}
}

// TestHostileGRPCStackClient sends hostile metadata and deadlines through a real
// grpc-go client to a loopback server running the full stack (unary: propagate →
// retry → shortcircuit; stream: propagate → shortcircuit).
func TestHostileGRPCStackClient(t *testing.T) {
	var counter shortcircuit.Counter
	addr, svc := startHostileGRPCStack(t, &counter)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	const year = 365 * 24 * time.Hour

	for _, tc := range []struct {
		name    string
		timeout time.Duration // 0: none
		md      []string
		code    codes.Code
		budget  time.Duration // for OK: the applied budget; hostileMax when clamped
		serving bool
		keys    []string
	}{
		{name: "100 years: clamped", timeout: 100 * year, code: codes.OK, budget: hostileMax},
		{name: "MaxInt64 deadline: clamped", timeout: 1<<63 - 1, code: codes.OK, budget: hostileMax},
		{name: "1ms: below the floor", timeout: time.Millisecond, code: codes.DeadlineExceeded},
		{name: "no deadline: default", code: codes.OK, budget: hostileDefault},
		{name: "trusted Envoy years", md: []string{"x-envoy-expected-rq-timeout-ms", "9999999999"}, code: codes.OK, budget: hostileMax},
		{name: "trusted Envoy unicode", md: []string{"x-envoy-expected-rq-timeout-ms", "1\u0660"}, code: codes.Internal}, // grpc-go's client refuses non-printable-ASCII metadata
		{name: "trusted Envoy 256 KiB", md: []string{"x-envoy-expected-rq-timeout-ms", strings.Repeat("9", 256<<10)}, code: codes.InvalidArgument},
		{name: "trusted Envoy 0", md: []string{"x-envoy-expected-rq-timeout-ms", "0"}, code: codes.DeadlineExceeded},
		{name: "trusted Envoy 3ms: below the floor", md: []string{"x-envoy-expected-rq-timeout-ms", "3"}, code: codes.DeadlineExceeded},
		{name: "attempts 2", md: []string{hostileAtt, "2"}, code: codes.OK, budget: hostileDefault, serving: true},
		{name: "attempts -1", md: []string{hostileAtt, "-1"}, code: codes.OK, budget: hostileDefault},
		{name: "attempts huge", md: []string{hostileAtt, "99999999999999999999"}, code: codes.OK, budget: hostileDefault},
		{name: "attempts non-numeric", md: []string{hostileAtt, "x"}, code: codes.OK, budget: hostileDefault},
		{name: "attempts repeated 0 then 5: first wins", md: []string{hostileAtt, "0", hostileAtt, "5"}, code: codes.OK, budget: hostileDefault},
		{name: "attempts repeated 5 then 0", md: []string{hostileAtt, "5", hostileAtt, "0"}, code: codes.OK, budget: hostileDefault, serving: true},
		{name: "attempts 1,000 times", md: hostileDup(hostileAtt, "1", 1000), code: codes.OK, budget: hostileDefault, serving: true},
		{name: "key 64 KiB", md: []string{"idempotency-key", strings.Repeat("k", 64<<10)}, code: codes.OK, budget: hostileDefault, keys: []string{strings.Repeat("k", 64<<10)}},
		{name: "key twice", md: []string{"idempotency-key", "a", "idempotency-key", "b"}, code: codes.OK, budget: hostileDefault, keys: []string{"a", "b"}},
		{name: "key with NUL: refused by grpc-go's client", md: []string{"idempotency-key", "a\x00b"}, code: codes.Internal},
	} {
		for _, kind := range []string{"unary", "stream"} {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				ctx := context.Background()
				if tc.timeout != 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.timeout)
					defer cancel()
				}
				if len(tc.md) > 0 {
					ctx = metadata.NewOutgoingContext(ctx, metadata.Pairs(tc.md...))
				}
				before := counter.Stats()
				var err error
				if kind == "unary" {
					_, err = client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
				} else {
					var s testgrpc.TestService_StreamingOutputCallClient
					if s, err = client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{}); err == nil {
						_, err = s.Recv()
						if err == io.EOF {
							err = nil
						}
					}
				}
				if status.Code(err) != tc.code {
					t.Fatalf("code %v (%v); want %v", status.Code(err), err, tc.code)
				}
				g, ran := svc.take()
				if tc.code != codes.OK {
					if ran {
						t.Fatal("the handler ran")
					}
					return
				}
				if !ran {
					t.Fatal("the handler did not run")
				}
				if after := counter.Stats(); after.Admitted != before.Admitted+1 {
					t.Errorf("guard admitted %d; want 1", after.Admitted-before.Admitted)
				}
				if g.ahead <= 0 || g.ahead > hostileMax {
					t.Errorf("handler deadline %v ahead; want within (0, %v]", g.ahead, hostileMax)
				}
				if tc.budget == hostileMax || tc.budget == hostileDefault {
					want := tc.budget
					if kind == "stream" && want == hostileDefault {
						want = hostileMax // a stream gets no default budget: the stream maximum
					}
					if g.budget != want {
						t.Errorf("applied budget %v; want %v", g.budget, want)
					}
				}
				if kind == "unary" && g.serving != tc.serving {
					t.Errorf("ServingRetry %v; want %v", g.serving, tc.serving)
				}
				if strings.Join(g.keys, "|") != strings.Join(tc.keys, "|") {
					t.Errorf("handler saw keys %.60q; want %.60q", g.keys, tc.keys)
				}
			})
		}
	}
}

// TestHostileGRPCWire writes hostile grpc-timeout headers, which no gRPC client
// library sends, over raw HTTP/2 to the loopback server of the full stack. grpc-go
// parses grpc-timeout before any interceptor runs: what it refuses (codes.Internal,
// "malformed grpc-timeout") never reaches the toolkit; what it accepts reaches it as
// a context deadline, and the toolkit clamps it.
func TestHostileGRPCWire(t *testing.T) {
	var counter shortcircuit.Counter
	addr, svc := startHostileGRPCStack(t, &counter)
	// net/http's own client, speaking HTTP/2 without TLS (prior knowledge), sends
	// what no gRPC library would.
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protocols}
	defer tr.CloseIdleConnections()

	for _, tc := range []struct {
		name     string
		timeouts []string // grpc-timeout header fields, in order
		code     codes.Code
		budget   time.Duration // for OK
		byGRPC   bool          // refused by grpc-go's transport, before the toolkit
		racy     bool          // grpc-go's own timer on the stream may answer first (a loaded machine runs the toolkit's refusal late)
	}{
		{name: "baseline 250m", timeouts: []string{"250m"}, code: codes.OK, budget: 250 * time.Millisecond},
		{name: "99999999H: clamped", timeouts: []string{"99999999H"}, code: codes.OK, budget: hostileMax},
		{name: "2562048H: grpc-go saturates, toolkit clamps", timeouts: []string{"2562048H"}, code: codes.OK, budget: hostileMax},
		{name: "0n: expired, refused by the toolkit or grpc-go's timer", timeouts: []string{"0n"}, code: codes.DeadlineExceeded, racy: true},
		{name: "3m: below the floor", timeouts: []string{"3m"}, code: codes.DeadlineExceeded, racy: true},
		{name: "-1S", timeouts: []string{"-1S"}, code: codes.Internal, byGRPC: true},
		{name: "+1S", timeouts: []string{"+1S"}, code: codes.Internal, byGRPC: true},
		{name: "9 digits", timeouts: []string{"123456789S"}, code: codes.Internal, byGRPC: true},
		{name: "full-width digit", timeouts: []string{"１S"}, code: codes.Internal, byGRPC: true},
		{name: "empty", timeouts: []string{""}, code: codes.Internal, byGRPC: true},
		{name: "unit only", timeouts: []string{"S"}, code: codes.Internal, byGRPC: true},
		{name: "lower-case s", timeouts: []string{"1s"}, code: codes.Internal, byGRPC: true},
		{name: "1 MiB value", timeouts: []string{strings.Repeat("9", hostileMiB)}, code: codes.Internal, byGRPC: true},
		// grpc-go keeps the last of repeated grpc-timeout fields; the clamp holds.
		{name: "repeated: short then years", timeouts: []string{"1S", "99999999H"}, code: codes.OK, budget: hostileMax},
		{name: "repeated: years then short", timeouts: []string{"99999999H", "1S"}, code: codes.OK, budget: time.Second},
		{name: "repeated: valid then malformed", timeouts: []string{"1S", "-1S"}, code: codes.Internal, byGRPC: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := counter.Stats()
			req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/grpc.testing.TestService/UnaryCall", strings.NewReader("\x00\x00\x00\x00\x00"))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/grpc")
			req.Header.Set("Te", "trailers")
			req.Header["Grpc-Timeout"] = tc.timeouts
			resp, err := tr.RoundTrip(req)
			if err != nil && tc.racy && strings.Contains(err.Error(), "CANCEL") {
				// grpc-go's timer fired first and reset the stream: refused all the
				// same, before the handler.
				if _, ran := svc.take(); ran {
					t.Fatal("the handler ran")
				}
				t.Logf("grpc-go's own timer answered first: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			code, msg := hostileGRPCStatus(resp)
			if code != tc.code {
				t.Fatalf("grpc-status %v (%q); want %v", code, msg, tc.code)
			}
			g, ran := svc.take()
			after := counter.Stats()
			if tc.code != codes.OK {
				if ran {
					t.Fatal("the handler ran")
				}
				if tc.byGRPC && !strings.Contains(msg, "grpc-timeout") {
					t.Errorf("message %q; want grpc-go's malformed grpc-timeout", msg)
				}
				if !tc.byGRPC && !tc.racy && !strings.HasPrefix(msg, "propagate: ") && !strings.HasPrefix(msg, "shortcircuit: ") {
					t.Errorf("message %q; want the toolkit's refusal", msg)
				}
				if tc.byGRPC && after != before {
					t.Errorf("the guard saw a request grpc-go refused: %+v → %+v", before, after)
				}
				return
			}
			if !ran {
				t.Fatal("the handler did not run")
			}
			if g.ahead <= 0 || g.ahead > hostileMax {
				t.Errorf("handler deadline %v ahead; want within (0, %v]", g.ahead, hostileMax)
			}
			if tc.budget == hostileMax && g.budget != hostileMax {
				t.Errorf("applied budget %v; want the clamp %v", g.budget, hostileMax)
			}
			if tc.budget < hostileMax && (g.budget > tc.budget || g.budget < tc.budget-time.Second/2) {
				t.Errorf("applied budget %v; want about %v", g.budget, tc.budget)
			}
		})
	}
}

// hostileGRPCStatus reads grpc-status and grpc-message from a trailers-only response's
// headers or from the trailers.
func hostileGRPCStatus(resp *http.Response) (codes.Code, string) {
	for _, h := range []http.Header{resp.Trailer, resp.Header} {
		if v := h.Get("Grpc-Status"); v != "" {
			var n int
			for _, c := range v {
				n = n*10 + int(c-'0')
			}
			return codes.Code(n), h.Get("Grpc-Message")
		}
	}
	return codes.Unknown, "no grpc-status (HTTP " + resp.Status + ")"
}
