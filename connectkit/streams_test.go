package connectkit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/connectkit"
)

// The streaming procedures of the tests' service: Upload (client streaming), Watch
// (server streaming), Chat (bidi).
const (
	procUpload = "/pkg.Store/Upload"
	procWatch  = "/pkg.Store/Watch"
	procChat   = "/pkg.Store/Chat"
)

// streamServer is a loopback server of the three streaming procedures, counting the
// HTTP requests that reach it, before connect-go sees them.
type streamServer struct {
	url      string
	hc       *http.Client
	requests atomic.Int32
}

// transports are the HTTP versions the stream tests run over: HTTP/1.1, and HTTP/2
// without TLS (h2c, prior knowledge). Bidi streams need HTTP/2.
var transports = []string{"http1", "h2c"}

// watchFunc handles Watch.
type watchFunc func(ctx context.Context, req *connect.Request[msg], s *connect.ServerStream[msg]) error

// serveStreams starts a streamServer over transport tr ("http1" or "h2c") whose Watch
// is watch (nil: one message, "tick"); Upload counts the messages it received, Chat
// echoes each message; Get answers "ok".
func serveStreams(t *testing.T, tr string, watch watchFunc, opts ...connect.HandlerOption) *streamServer {
	t.Helper()
	if watch == nil {
		watch = func(ctx context.Context, req *connect.Request[msg], s *connect.ServerStream[msg]) error {
			return s.Send(wrapperspb.String("tick"))
		}
	}
	s := new(streamServer)
	mux := http.NewServeMux()
	mux.Handle(procGet, connect.NewUnaryHandler(procGet, ok, opts...))
	mux.Handle(procWatch, connect.NewServerStreamHandler(procWatch, watch, opts...))
	mux.Handle(procUpload, connect.NewClientStreamHandler(procUpload, func(ctx context.Context, st *connect.ClientStream[msg]) (*connect.Response[msg], error) {
		n := 0
		for st.Receive() {
			n++
		}
		if err := st.Err(); err != nil {
			return nil, err
		}
		return connect.NewResponse(wrapperspb.String(string(rune('0' + n)))), nil
	}, opts...))
	mux.Handle(procChat, connect.NewBidiStreamHandler(procChat, func(ctx context.Context, st *connect.BidiStream[msg, msg]) error {
		for {
			m, err := st.Receive()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			if err := st.Send(m); err != nil {
				return err
			}
		}
	}, opts...))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		mux.ServeHTTP(w, r)
	}))
	tp := &http.Transport{}
	if tr == "h2c" {
		srv.Config.Protocols = new(http.Protocols)
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
		tp.Protocols = new(http.Protocols)
		tp.Protocols.SetUnencryptedHTTP2(true)
	}
	srv.Start()
	t.Cleanup(func() {
		tp.CloseIdleConnections()
		srv.Close()
	})
	s.url, s.hc = srv.URL, &http.Client{Transport: tp}
	return s
}

// spanCounts is an OTel SDK tracer provider that remembers the spans started and
// ended, and a context holding a span of it (the caller's, not a client span).
func spanCounts(t *testing.T) (*tracetest.SpanRecorder, context.Context, func()) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "caller")
	return rec, ctx, func() { span.End() }
}

// ctxCapture is a connect interceptor, put beneath the stack, that remembers the
// context each stream was created with (the context propagate derived for it), and
// counts the calls of the stream's Send, CloseRequest, Receive and CloseResponse
// that reach the connection.
type ctxCapture struct {
	connect.Interceptor
	ctxs  chan context.Context
	calls atomic.Int32
}

func newCtxCapture() *ctxCapture {
	return &ctxCapture{Interceptor: connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc { return next }), ctxs: make(chan context.Context, 16)}
}

func (c *ctxCapture) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		c.ctxs <- ctx
		return &countingConn{StreamingClientConn: next(ctx, spec), calls: &c.calls}
	}
}

type countingConn struct {
	connect.StreamingClientConn
	calls *atomic.Int32
}

func (c *countingConn) Send(m any) error {
	c.calls.Add(1)
	return c.StreamingClientConn.Send(m)
}

func (c *countingConn) CloseRequest() error {
	c.calls.Add(1)
	return c.StreamingClientConn.CloseRequest()
}

func (c *countingConn) Receive(m any) error {
	c.calls.Add(1)
	return c.StreamingClientConn.Receive(m)
}

func (c *countingConn) CloseResponse() error {
	c.calls.Add(1)
	return c.StreamingClientConn.CloseResponse()
}

// kindErr is the error of a stream of one kind.
type kindErr struct {
	kind string
	err  error
}

// refusedKinds opens a stream of each kind (client, server, bidi) on srv through
// opts under ctx and returns each one's error: the error of the first call that
// failed, having used the stream as a caller would to its end (CloseAndReceive,
// Close, CloseRequest and CloseResponse).
func refusedKinds(t *testing.T, ctx context.Context, srv *streamServer, opts ...connect.ClientOption) []kindErr {
	t.Helper()
	var errs []kindErr

	up := connect.NewClient[msg, msg](srv.hc, srv.url+procUpload, opts...).CallClientStream(ctx)
	err := up.Send(wrapperspb.String("a"))
	if _, cerr := up.CloseAndReceive(); err == nil {
		err = cerr
	}
	errs = append(errs, kindErr{"client", err})

	w, err := connect.NewClient[msg, msg](srv.hc, srv.url+procWatch, opts...).CallServerStream(ctx, connect.NewRequest(wrapperspb.String("a")))
	if err == nil {
		for w.Receive() {
		}
		err = w.Err()
		_ = w.Close()
	}
	errs = append(errs, kindErr{"server", err})

	chat := connect.NewClient[msg, msg](srv.hc, srv.url+procChat, opts...).CallBidiStream(ctx)
	err = chat.Send(wrapperspb.String("a"))
	_ = chat.CloseRequest()
	if _, rerr := chat.Receive(); err == nil {
		err = rerr
	}
	_ = chat.CloseResponse()
	errs = append(errs, kindErr{"bidi", err})
	return errs
}

// A stream refused by propagate's floor (less left than floor + reserve) sends
// nothing, whatever its kind: no request reaches the server, and the call span
// started for it ends.
func TestFloorRefusedStreamSendsNothing(t *testing.T) {
	for _, tr := range transports {
		for _, p := range protocols {
			t.Run(tr+"/"+p.name, func(t *testing.T) {
				srv := serveStreams(t, tr, nil)
				rec, ctx, endCaller := spanCounts(t)
				ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				defer cancel()
				b := breaker.New()
				opt := connectkit.ClientOption(deadlinekit.WithFloor(time.Second), deadlinekit.WithReserve(100*time.Millisecond), deadlinekit.WithSharedBreaker(b))
				capture := newCtxCapture()
				for _, k := range refusedKinds(t, ctx, srv, p.opt, opt, connect.WithInterceptors(capture)) {
					if connect.CodeOf(k.err) != connect.CodeDeadlineExceeded {
						t.Errorf("%s stream: err = %v; want DeadlineExceeded", k.kind, k.err)
					}
				}
				if n := srv.requests.Load(); n != 0 {
					t.Errorf("%d requests reached the server; want none: a refused stream sends nothing", n)
				}
				if n := capture.calls.Load(); n != 0 {
					t.Errorf("%d calls of the refused streams reached the connection; want none", n)
				}
				if st := b.Stats(); st.Successes != 0 || st.Failures != 0 {
					t.Errorf("the breaker counted %d successes, %d failures of streams never sent; want none", st.Successes, st.Failures)
				}
				endCaller()
				if s, e := len(rec.Started()), len(rec.Ended()); s != e {
					t.Errorf("%d spans started, %d ended", s, e)
				}
			})
		}
	}
}

// A stream refused by an open breaker sends nothing, and ends what the layers
// beneath the breaker started for it: the call span and the context propagate
// derived.
func TestBreakerRefusedStreamEndsWhatWasStarted(t *testing.T) {
	for _, tr := range transports {
		for _, p := range protocols {
			t.Run(tr+"/"+p.name, func(t *testing.T) {
				down := func(ctx context.Context, req *connect.Request[msg], s *connect.ServerStream[msg]) error {
					return connect.NewError(connect.CodeUnavailable, errors.New("down"))
				}
				srv := serveStreams(t, tr, down)
				b := breaker.New(breaker.WithConsecutiveFailures(1))
				capture := newCtxCapture()
				opts := []connect.ClientOption{p.opt, connectkit.ClientOption(deadlinekit.WithSharedBreaker(b), deadlinekit.WithReserve(10*time.Millisecond)), connect.WithInterceptors(capture)}
				w, err := connect.NewClient[msg, msg](srv.hc, srv.url+procWatch, opts...).CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("a")))
				if err == nil {
					for w.Receive() {
					}
					err = w.Err()
					_ = w.Close()
				}
				if connect.CodeOf(err) != connect.CodeUnavailable {
					t.Fatalf("err = %v; want UNAVAILABLE, which opens the circuit", err)
				}
				<-capture.ctxs
				sent := srv.requests.Load()
				capture.calls.Store(0)

				rec, ctx, endCaller := spanCounts(t)
				ctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				for _, k := range refusedKinds(t, ctx, srv, opts...) {
					kind := k.kind
					if !errors.Is(k.err, breaker.ErrOpen) {
						t.Errorf("%s stream: err = %v; want breaker.ErrOpen", kind, k.err)
					}
					derived := <-capture.ctxs
					if _, ok := derived.Deadline(); !ok {
						t.Errorf("%s stream: the context beneath the stack has no deadline; want propagate's", kind)
					}
					if derived.Err() == nil {
						t.Errorf("%s stream: the context propagate derived for the refused stream is still live", kind)
					}
				}
				if n := srv.requests.Load() - sent; n != 0 {
					t.Errorf("%d requests of refused streams reached the server; want none", n)
				}
				if n := capture.calls.Load(); n != 0 {
					t.Errorf("%d calls of the refused streams reached the connection; want none", n)
				}
				endCaller()
				if s, e := len(rec.Started()), len(rec.Ended()); s != e || s != 4 {
					t.Errorf("%d spans started, %d ended; want 4 each (the caller's, a call span per stream)", s, e)
				}
			})
		}
	}
}

// switchable is a Watch that fails with UNAVAILABLE while down is set, and else
// sends "tick" (unless idle is set) and then holds the stream open until its
// context ends, or until release is closed.
type switchable struct {
	down, idle atomic.Bool // idle: it sends nothing
	release    chan struct{}
}

func newSwitchable() *switchable { return &switchable{release: make(chan struct{})} }

func (w *switchable) watch(ctx context.Context, req *connect.Request[msg], s *connect.ServerStream[msg]) error {
	if w.down.Load() {
		return connect.NewError(connect.CodeUnavailable, errors.New("down"))
	}
	if !w.idle.Load() {
		if err := s.Send(wrapperspb.String("tick")); err != nil {
			return err
		}
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-w.release:
		return nil
	}
}

// halfOpen opens b's circuit with a failing Watch on srv through opts (b trips on
// one failure, and sleeps a millisecond) and waits until the circuit lets probes
// through.
func halfOpen(t *testing.T, b *breaker.Breaker, srv *streamServer, w *switchable, opts ...connect.ClientOption) {
	t.Helper()
	w.down.Store(true)
	defer w.down.Store(false)
	st, err := connect.NewClient[msg, msg](srv.hc, srv.url+procWatch, opts...).CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("a")))
	if err == nil {
		for st.Receive() {
		}
		err = st.Err()
		_ = st.Close()
	}
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("err = %v; want UNAVAILABLE", err)
	}
	for {
		cs := b.Circuits()
		if len(cs) == 1 && cs[0].State == breaker.HalfOpen {
			return
		}
		time.Sleep(time.Millisecond) // the sleep is a lower bound: no upper one is assumed
	}
}

// connect-go lets a bidi stream's Send and Receive run on two goroutines at once: the
// stream is admitted once, as one probe of a half-open circuit, and its end counted
// once (closing the circuit).
func TestBidiSendReceiveConcurrently(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			w := newSwitchable()
			srv := serveStreams(t, "h2c", w.watch)
			b := breaker.New(breaker.WithConsecutiveFailures(1), breaker.WithOpenFor(time.Millisecond), breaker.WithProbes(1))
			opts := []connect.ClientOption{p.opt, connectkit.ClientOption(deadlinekit.WithSharedBreaker(b))}
			halfOpen(t, b, srv, w, opts...)
			probes := b.Stats().Probes

			chat := connect.NewClient[msg, msg](srv.hc, srv.url+procChat, opts...).CallBidiStream(context.Background())
			recv := make(chan error, 1)
			go func() {
				m, err := chat.Receive()
				if err == nil && m.GetValue() != "a" {
					err = errors.New("got " + m.GetValue())
				}
				if err == nil {
					_, err = chat.Receive()
				}
				recv <- err
			}()
			if err := chat.Send(wrapperspb.String("a")); err != nil {
				t.Errorf("Send: %v", err)
			}
			if err := chat.CloseRequest(); err != nil {
				t.Errorf("CloseRequest: %v", err)
			}
			if err := <-recv; !errors.Is(err, io.EOF) {
				t.Errorf("Receive: %v; want the echo, then io.EOF", err)
			}
			_ = chat.CloseResponse()
			if n := b.Stats().Probes - probes; n != 1 {
				t.Errorf("the stream took %d probe slots; want 1", n)
			}
			if s := b.Circuits()[0].State; s != breaker.Closed {
				t.Errorf("circuit %v after the probe stream ended well; want closed", s)
			}
		})
	}
}

// A healthy long-lived watch taken as the half-open probe closes the circuit at its
// first message, not when it ends: the target's unary calls flow at once.
func TestProbeWatchClosesAtFirstMessage(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			w := newSwitchable()
			srv := serveStreams(t, "h2c", w.watch)
			// The sleep is long beside the test's steps: the probe's slot would be
			// given up on only after it.
			b := breaker.New(breaker.WithConsecutiveFailures(1), breaker.WithOpenFor(300*time.Millisecond), breaker.WithProbes(1))
			// No retry layer: it would wait out a refusal's pushback and send later.
			opts := []connect.ClientOption{p.opt, connectkit.ClientOption(deadlinekit.WithSharedBreaker(b), deadlinekit.Without(deadlinekit.Retry))}
			halfOpen(t, b, srv, w, opts...)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st, err := connect.NewClient[msg, msg](srv.hc, srv.url+procWatch, opts...).CallServerStream(ctx, connect.NewRequest(wrapperspb.String("a")))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if !st.Receive() {
				t.Fatalf("the watch ended: %v", st.Err())
			}
			if s := b.Circuits()[0].State; s != breaker.Closed {
				t.Errorf("circuit %v once the probe watch answered; want closed", s)
			}
			if _, err := client(srv.hc, srv.url, procGet, opts...).CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("a"))); err != nil {
				t.Errorf("a unary call while the probe watch runs: %v; want it sent", err)
			}
			probes := b.Stats()
			cancel()
			for st.Receive() {
			}
			if after := b.Stats(); after.Successes+after.Failures+after.Neutral != probes.Successes+probes.Failures+probes.Neutral {
				t.Errorf("the probe watch's end was counted again: %+v, then %+v", probes, after)
			}
		})
	}
}

// A watch that receives nothing before its caller's deadline says nothing of the
// target: idle watches do not open the circuit.
func TestIdleWatchDeadlineIsNeutral(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			w := newSwitchable()
			w.idle.Store(true)
			srv := serveStreams(t, "h2c", w.watch)
			b := breaker.New(breaker.WithConsecutiveFailures(1))
			opts := []connect.ClientOption{p.opt, connectkit.ClientOption(deadlinekit.WithSharedBreaker(b))}
			for range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				st, err := connect.NewClient[msg, msg](srv.hc, srv.url+procWatch, opts...).CallServerStream(ctx, connect.NewRequest(wrapperspb.String("a")))
				if err == nil {
					for st.Receive() {
					}
					err = st.Err()
					_ = st.Close()
				}
				cancel()
				if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
					t.Fatalf("err = %v; want DeadlineExceeded", err)
				}
			}
			if st := b.Stats(); st.Failures != 0 || st.Opens != 0 {
				t.Errorf("stats %+v after 3 idle watches ended by their deadline; want no failure, no open", st)
			}
		})
	}
}
