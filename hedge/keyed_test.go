package hedge_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/internal/rpc"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
)

// keyedCase is one row of the keyed-write tests: a call (keyed or not, of a write
// or not) through a Hedger made with opts, whose copies stall for 1 s but the last
// one wanted, which answers at once (a call sent once stalls).
type keyedCase struct {
	name      string
	write     bool // POST / a method declared nowhere; else GET / a method declared idempotent
	key       bool
	opts      []hedge.Option
	wantMarks []string // deadlinekit-hedged-above of each copy, in the order sent
	wantSkip  string
}

var keyedCases = []keyedCase{
	// The chain rule as before: the last copy may be hedged below.
	{"idempotent", false, false, nil, []string{"1", "0"}, ""},
	{"keyed idempotent", false, true, nil, []string{"1", "0"}, ""},
	// A keyed write is sent once, unmarked: the hops below may hedge their calls.
	{"keyed write", true, true, nil, []string{""}, "keyed_write"},
	// Opted in, every copy is covered: nothing below sends it again.
	{"keyed write, WithKeyedWrites", true, true, []hedge.Option{hedge.WithKeyedWrites()}, []string{"1", "1"}, ""},
	{"keyed write, WithKeyedWrites, three copies", true, true, []hedge.Option{hedge.WithKeyedWrites(), hedge.WithMaxAttempts(3)}, []string{"1", "1", "1"}, ""},
	{"unkeyed write, WithKeyedWrites", true, false, []hedge.Option{hedge.WithKeyedWrites()}, []string{""}, "not_idempotent"},
}

// check compares what the copies carried and the Hedger's counters with the row's.
func (tc keyedCase) check(t *testing.T, marks []string, st hedge.Stats, skip string) {
	t.Helper()
	if !slices.Equal(marks, tc.wantMarks) {
		t.Errorf("copies marked %q; want %q", marks, tc.wantMarks)
	}
	if skip != tc.wantSkip {
		t.Errorf("hedge.skip %q; want %q", skip, tc.wantSkip)
	}
	wantKeyed := uint64(0)
	if tc.wantSkip == "keyed_write" {
		wantKeyed = 1
	}
	if st.KeyedWrites != wantKeyed || st.Hedges != uint64(len(tc.wantMarks)-1) {
		t.Errorf("stats %+v; want KeyedWrites %d, Hedges %d", st, wantKeyed, len(tc.wantMarks)-1)
	}
}

func (tc keyedCase) hedger() *hedge.Hedger {
	return hedge.New(append([]hedge.Option{hedge.WithDelay(hedge.Delay{Initial: 10 * time.Millisecond})}, tc.opts...)...)
}

// marks collects the marks of the copies of one call, in the order they were sent.
type marks struct {
	mu sync.Mutex
	vs []string
}

// add records v, the mark of a copy of a call of row tc, and tells whether that
// copy stalls.
func (m *marks) add(tc keyedCase, v string) (stall bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.vs = append(m.vs, v)
	return len(m.vs) < len(tc.wantMarks) || len(tc.wantMarks) == 1
}

// TestKeyedWriteHTTP: a keyed POST is not hedged by default (skip keyed_write,
// Stats.KeyedWrites); under WithKeyedWrites it is, and every copy, the last one
// included, carries deadlinekit-hedged-above: 1.
func TestKeyedWriteHTTP(t *testing.T) {
	for _, tc := range keyedCases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var m marks
				h := tc.hedger()
				rt := h.Transport(testkit.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
					_, _ = io.Copy(io.Discard, r.Body)
					if m.add(tc, r.Header.Get("Deadlinekit-Hedged-Above")) {
						if err := sleep(r.Context(), time.Second); err != nil {
							return nil, err
						}
					}
					return response(r, 200, nil), nil
				}))
				ctx, tp := traced(t.Context())
				method := http.MethodGet
				if tc.write {
					method = http.MethodPost
				}
				req, _ := http.NewRequestWithContext(ctx, method, "http://backend.test/", strings.NewReader("x"))
				if tc.key {
					req.Header.Set("Idempotency-Key", "pay-1")
				}
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				synctest.Wait()
				tc.check(t, m.vs, h.Stats(), only(t, tp, method).attr("deadlinekit.hedge.skip").AsString())
			})
		})
	}
}

// TestKeyedWriteGRPC: the same for a gRPC method declared nowhere as idempotent,
// with an idempotency-key in its metadata.
func TestKeyedWriteGRPC(t *testing.T) {
	registerStore(t)
	for _, tc := range keyedCases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var m marks
				h := tc.hedger()
				invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
					md, _ := metadata.FromOutgoingContext(ctx)
					v := ""
					if vs := md.Get("deadlinekit-hedged-above"); len(vs) > 0 {
						v = vs[len(vs)-1]
					}
					if m.add(tc, v) {
						return sleep(ctx, time.Second)
					}
					return nil
				}
				ctx, tp := traced(t.Context())
				method := methodGet
				if tc.write {
					method = methodPost
				}
				if tc.key {
					ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", "pay-1")
				}
				if err := h.UnaryClientInterceptor()(ctx, method, &wrapperspb.StringValue{}, &wrapperspb.StringValue{}, nil, invoker); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				span := only(t, tp, "Sent.deadlinekit.hedgetest.Store."+method[strings.LastIndexByte(method, '/')+1:])
				tc.check(t, m.vs, h.Stats(), span.attr("deadlinekit.hedge.skip").AsString())
			})
		})
	}
}

// TestKeyedWriteRPC: the same through the layer package connectkit uses.
func TestKeyedWriteRPC(t *testing.T) {
	layer := rpc.Lookup[func(*hedge.Hedger, []string) rpc.Layer]("hedge")
	for _, tc := range keyedCases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var m marks
				h := tc.hedger()
				send := func(ctx context.Context) rpc.Answer {
					md, _ := metadata.FromOutgoingContext(ctx)
					v := ""
					if vs := md.Get("deadlinekit-hedged-above"); len(vs) > 0 {
						v = vs[len(vs)-1]
					}
					if m.add(tc, v) {
						if err := sleep(ctx, time.Second); err != nil {
							return rpc.Answer{Err: err}
						}
					}
					return rpc.Answer{Resp: "ok"}
				}
				ctx, tp := traced(t.Context())
				if tc.key {
					ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", "pay-1")
				}
				c := &rpc.Call{Procedure: "/pay.Payments/Charge", Idempotent: !tc.write}
				if a := layer(h, nil).Client(ctx, c, send); a.Err != nil {
					t.Fatal(a.Err)
				}
				synctest.Wait()
				span := only(t, tp, "Sent.pay.Payments.Charge")
				tc.check(t, m.vs, h.Stats(), span.attr("deadlinekit.hedge.skip").AsString())
			})
		})
	}
}
