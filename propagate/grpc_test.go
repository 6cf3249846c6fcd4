package propagate_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/deadline"
	"github.com/deadlinekit/deadlinekit/propagate"
)

func TestUnaryClientInterceptor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel()
		var got time.Duration
		var called bool
		invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			called = true
			got, _ = deadline.Remaining(ctx)
			return nil
		}
		for _, tc := range []struct {
			name string
			opts []propagate.Option
			want time.Duration
			code codes.Code
		}{
			{"pass through", nil, 250 * time.Millisecond, codes.OK},
			{"reserve", []propagate.Option{propagate.WithReserve(50 * time.Millisecond)}, 200 * time.Millisecond, codes.OK},
			{"cap", []propagate.Option{propagate.WithMaxPerHop(100 * time.Millisecond)}, 100 * time.Millisecond, codes.OK},
			{"floor", []propagate.Option{propagate.WithFloor(300 * time.Millisecond)}, 0, codes.DeadlineExceeded},
		} {
			called = false
			err := propagate.UnaryClientInterceptor(tc.opts...)(ctx, "/svc/M", nil, nil, nil, invoker)
			if status.Code(err) != tc.code {
				t.Fatalf("%s: code %v (%v); want %v", tc.name, status.Code(err), err, tc.code)
			}
			if tc.code != codes.OK {
				if called || !errors.Is(err, deadline.ErrInsufficientBudget) || !strings.Contains(err.Error(), "250ms left, need 300ms") {
					t.Errorf("%s: called=%v err=%v; want refused before sending with the numbers", tc.name, called, err)
				}
				continue
			}
			if got != tc.want {
				t.Errorf("%s: call ran under %v; want %v", tc.name, got, tc.want)
			}
		}
		time.Sleep(250 * time.Millisecond)
		called = false
		err := propagate.UnaryClientInterceptor()(ctx, "/svc/M", nil, nil, nil, invoker)
		if called || status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("expired: called=%v err=%v; want DeadlineExceeded without sending", called, err)
		}
	})
}

type fakeClientStream struct {
	grpc.ClientStream
	ctx context.Context
	n   int
}

func (s *fakeClientStream) RecvMsg(any) error {
	if s.n == 0 {
		return io.EOF
	}
	s.n--
	return nil
}

func TestStreamClientInterceptorReleasesContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var fs *fakeClientStream
		streamer := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			fs = &fakeClientStream{ctx: ctx, n: 2}
			return fs, nil
		}
		s, err := propagate.StreamClientInterceptor(propagate.WithReserve(100*time.Millisecond))(ctx, &grpc.StreamDesc{ServerStreams: true}, nil, "/svc/S", streamer)
		if err != nil {
			t.Fatal(err)
		}
		if left, _ := deadline.Remaining(fs.ctx); left != 900*time.Millisecond {
			t.Fatalf("stream runs under %v; want 900ms", left)
		}
		for s.RecvMsg(nil) == nil {
			if fs.ctx.Err() != nil {
				t.Fatal("stream context ended while messages still came")
			}
		}
		if fs.ctx.Err() == nil {
			t.Fatal("stream context still alive after the stream ended")
		}
	})
}

func TestServerInterceptors(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name     string
		opts     []propagate.Option
		deadline time.Duration // 0: the request carried no grpc-timeout
		md       metadata.MD
		code     codes.Code
		left     time.Duration
		source   string
		clamped  bool
	}{
		{"grpc-timeout", nil, 250 * ms, nil, codes.OK, 250 * ms, "grpc-timeout", false},
		{"clamped", []propagate.Option{propagate.WithMaxTimeout(time.Second)}, time.Hour, nil, codes.OK, time.Second, "grpc-timeout", true},
		{"default", nil, 0, nil, codes.OK, deadline.DefaultBudget, "default", false},
		{"no default", []propagate.Option{propagate.WithDefaultTimeout(0)}, 0, nil, codes.OK, 0, "", false},
		{"envoy untrusted", nil, 0, metadata.Pairs("x-envoy-expected-rq-timeout-ms", "70"), codes.OK, deadline.DefaultBudget, "default", false},
		{"envoy trusted", []propagate.Option{propagate.WithTrustEnvoy()}, 0, metadata.Pairs("x-envoy-expected-rq-timeout-ms", "70"), codes.OK, 70 * ms, "x-envoy-expected-rq-timeout-ms", false},
		{"grpc-timeout wins over envoy", []propagate.Option{propagate.WithTrustEnvoy()}, 50 * ms, metadata.Pairs("x-envoy-expected-rq-timeout-ms", "70"), codes.OK, 50 * ms, "grpc-timeout", false},
		{"envoy malformed", []propagate.Option{propagate.WithTrustEnvoy()}, 0, metadata.Pairs("x-envoy-expected-rq-timeout-ms", "7s"), codes.InvalidArgument, 0, "", false},
		{"envoy repeated", []propagate.Option{propagate.WithTrustEnvoy()}, 0, metadata.Pairs("x-envoy-expected-rq-timeout-ms", "7", "x-envoy-expected-rq-timeout-ms", "9"), codes.InvalidArgument, 0, "", false},
		{"envoy malformed ignored", []propagate.Option{propagate.WithTrustEnvoy(), propagate.WithIgnoreMalformed()}, 0, metadata.Pairs("x-envoy-expected-rq-timeout-ms", "7s"), codes.OK, deadline.DefaultBudget, "default", false},
		{"envoy zero", []propagate.Option{propagate.WithTrustEnvoy()}, 0, metadata.Pairs("x-envoy-expected-rq-timeout-ms", "0"), codes.DeadlineExceeded, 0, "", false},
		{"arrives expired", nil, -ms, nil, codes.DeadlineExceeded, 0, "", false},
	} {
		for _, kind := range []string{"unary", "stream"} {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				if tc.md != nil {
					ctx = metadata.NewIncomingContext(ctx, tc.md)
				}
				if tc.deadline != 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.deadline)
					defer cancel()
				}
				var called, has bool
				var left time.Duration
				var in propagate.Inbound
				observe := func(ctx context.Context) {
					called = true
					left, has = deadline.Remaining(ctx)
					in, _ = propagate.InboundFromContext(ctx)
				}
				var err error
				if kind == "unary" {
					_, err = propagate.UnaryServerInterceptor(tc.opts...)(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/svc/M"},
						func(ctx context.Context, req any) (any, error) { observe(ctx); return nil, nil })
				} else {
					err = propagate.StreamServerInterceptor(tc.opts...)(nil, &fakeServerStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: "/svc/S"},
						func(srv any, ss grpc.ServerStream) error { observe(ss.Context()); return nil })
				}
				if status.Code(err) != tc.code {
					t.Fatalf("%s/%s: code %v (%v); want %v", tc.name, kind, status.Code(err), err, tc.code)
				}
				if tc.code != codes.OK {
					if called {
						t.Errorf("%s/%s: the handler ran", tc.name, kind)
					}
					return
				}
				want := propagate.Inbound{Budget: tc.left, Source: tc.source, Clamped: tc.clamped}
				if kind == "stream" {
					// A stream gets no default budget, and the unary clamp does
					// not cut its caller's deadline.
					switch {
					case tc.source == propagate.SourceDefault:
						want = propagate.Inbound{}
					case tc.clamped:
						want = propagate.Inbound{Budget: tc.deadline, Source: tc.source}
					}
				}
				if want.Budget == 0 {
					if has {
						t.Errorf("%s/%s: handler got a deadline (%v)", tc.name, kind, left)
					}
					return
				}
				if left != want.Budget {
					t.Errorf("%s/%s: handler saw %v; want %v", tc.name, kind, left, want.Budget)
				}
				if in != want {
					t.Errorf("%s/%s: Inbound %+v; want %+v", tc.name, kind, in, want)
				}
			})
		}
	}
}

type fakeServerStream struct {
	grpc.ServerStream
	ctx     context.Context
	trailer metadata.MD
}

func (s *fakeServerStream) Context() context.Context { return s.ctx }

// SetTrailer keeps the trailer, as a refusal sets one.
func (s *fakeServerStream) SetTrailer(md metadata.MD) { s.trailer = metadata.Join(s.trailer, md) }

func TestServerInterceptorUntrustedCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		md := metadata.Pairs("x-envoy-expected-rq-timeout-ms", "70", "grpc-previous-rpc-attempts", "1", "x-peer", "outside")
		ctx := metadata.NewIncomingContext(context.Background(), md)
		trust := propagate.WithTrustGRPC(func(ctx context.Context) bool {
			md, _ := metadata.FromIncomingContext(ctx)
			return len(md.Get("x-peer")) == 0
		})
		var in propagate.Inbound
		var seenMD metadata.MD
		_, err := propagate.UnaryServerInterceptor(trust, propagate.WithTrustEnvoy())(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/svc/M"},
			func(ctx context.Context, req any) (any, error) {
				in, _ = propagate.InboundFromContext(ctx)
				seenMD, _ = metadata.FromIncomingContext(ctx)
				return nil, nil
			})
		if err != nil {
			t.Fatal(err)
		}
		if in.Source != "default" {
			t.Errorf("untrusted caller's Envoy header was believed: %+v", in)
		}
		if len(seenMD.Get("grpc-previous-rpc-attempts")) != 0 || len(seenMD.Get("x-envoy-expected-rq-timeout-ms")) != 0 || len(seenMD.Get("x-peer")) != 1 {
			t.Errorf("handler metadata %v; want the deadline and attempt keys removed, the rest kept", seenMD)
		}
		if len(md.Get("grpc-previous-rpc-attempts")) != 1 {
			t.Error("the caller's metadata map was modified in place")
		}
	})
}
