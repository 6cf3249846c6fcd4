package connectkit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/propagate"
)

// A connect stream that came without a deadline gets none under HandlerOption (no
// default budget), and one whose caller stated a long deadline keeps it past the
// unary clamp; a unary call of the same handler options gets the default and the
// clamp. Under each protocol, over real loopback HTTP/2.
func TestStreamGetsNoDefaultBudget(t *testing.T) {
	var streamLeft, unaryLeft atomic.Int64
	opt := connectkit.HandlerOption(deadlinekit.WithPropagate(propagate.WithMaxTimeout(time.Minute)))
	mux := http.NewServeMux()
	mux.Handle("/pkg.Store/Watch", connect.NewServerStreamHandler("/pkg.Store/Watch",
		func(ctx context.Context, req *connect.Request[msg], s *connect.ServerStream[msg]) error {
			d, _ := deadline.Remaining(ctx)
			streamLeft.Store(int64(d))
			return s.Send(wrapperspb.String("tick"))
		}, opt))
	mux.Handle(procGet, connect.NewUnaryHandler(procGet, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
		d, _ := deadline.Remaining(ctx)
		unaryLeft.Store(int64(d))
		return ok(ctx, req)
	}, opt))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			watch := connect.NewClient[msg, msg](srv.Client(), srv.URL+"/pkg.Store/Watch", p.opt)
			get := client(srv.Client(), srv.URL, procGet, p.opt)
			for _, asked := range []time.Duration{0, time.Hour} {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if asked > 0 {
					ctx, cancel = context.WithTimeout(ctx, asked)
				}
				st, err := watch.CallServerStream(ctx, connect.NewRequest(wrapperspb.String("a")))
				if err != nil {
					t.Fatal(err)
				}
				for st.Receive() {
				}
				if err := st.Err(); err != nil {
					t.Fatal(err)
				}
				st.Close()
				got := time.Duration(streamLeft.Load())
				switch {
				case asked == 0 && got != 0:
					t.Errorf("a stream without deadline had %v left; want none", got)
				case asked > 0 && got <= time.Minute:
					t.Errorf("a stream asking for 1h had %v left; want its caller's hour, not the unary clamp", got)
				}
				if _, err := get.CallUnary(ctx, connect.NewRequest(wrapperspb.String("a"))); err != nil {
					t.Fatal(err)
				}
				got = time.Duration(unaryLeft.Load())
				want := deadline.DefaultBudget
				if asked > 0 {
					want = time.Minute
				}
				if got <= 0 || got > want {
					t.Errorf("a unary call asking for %v had %v left; want at most %v", asked, got, want)
				}
				cancel()
			}
		})
	}
}
