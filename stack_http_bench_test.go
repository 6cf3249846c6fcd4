package deadlinekit_test

import (
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/internal/attempts"
	"github.com/deadlinekit/deadlinekit/internal/idempotency"
	"github.com/deadlinekit/deadlinekit/internal/pairbench"
	"github.com/deadlinekit/deadlinekit/internal/quantile"
	"github.com/deadlinekit/deadlinekit/otelattr"
	"github.com/deadlinekit/deadlinekit/propagate"
)

// BenchmarkStackHTTP is [BenchmarkStack] on a loopback HTTP/1.1 GET: the stack of
// deadlinekit.NewTransport (retry → breaker → hedge → propagate) and
// deadlinekit.NewHandler (propagate → retry's server side → shortcircuit), with
// their defaults, paired call by call with the bare call, untraced and traced
// (otelhttp on both sides, a recording SDK, inside a recording span).
//
//	go test -run '^$' -bench 'StackHTTP$' -benchtime 20000x -count 3 .
func BenchmarkStackHTTP(b *testing.B) {
	untracedAndTraced(b, func(b *testing.B, traced bool) {
		bare := startHTTPCall(b, nil, nil, traced)
		with := startHTTPCall(b, func(rt http.RoundTripper) http.RoundTripper { return deadlinekit.NewTransport(rt) },
			func(h http.Handler) http.Handler { return deadlinekit.NewHandler(h) }, traced)
		b.ReportAllocs()
		pairbench.Run(b, bare, with)
	})
}

// BenchmarkStackFloorHTTP is [BenchmarkStackFloor]'s "fused" on the call of
// [BenchmarkStackHTTP]: the least work the promises need, in one transport and one
// middleware (floorTransport, floorHandler), untraced and traced with an attempt
// span per attempt; "fused-wire" adds the chain rule's mark to the request's header,
// as [BenchmarkStackFloor]'s does to the call's metadata; "fused-all" adds the rest
// of what deadlinekit.NewTransport and NewHandler promise, as [BenchmarkStackFloor]'s
// does, and what these two add by default: the reserve (the attempt's deadline and
// the budget it sends both short of the call's by deadlinekit.DefaultReserve), the
// breaker's circuit per host (a lookup and an outcome counted), retry's server side
// (the attempt count read, for the one-layer rule) and the guard's learned floor (a
// window of the route's handler durations). Traced, otelhttp's client span is the
// call's: the stack starts none of its own.
//
//	go test -run '^$' -bench 'StackFloorHTTP' -benchtime 20000x -count 3 .
func BenchmarkStackFloorHTTP(b *testing.B) {
	for _, v := range []struct {
		name   string
		traced bool
	}{{"fused/untraced", false}, {"fused/traced-span", true}, {"fused-wire/untraced", false}, {"fused-wire/traced-span", true},
		{"fused-all/untraced", false}, {"fused-all/traced-span", true}} {
		b.Run(v.name, func(b *testing.B) {
			c := newFloorClient(recordSpan)
			c.wire = strings.HasPrefix(v.name, "fused-wire/")
			server := floorHandler
			if strings.HasPrefix(v.name, "fused-all/") {
				c.all, c.wire, server = true, true, floorHandlerAll
			}
			bare := startHTTPCall(b, nil, nil, v.traced)
			with := startHTTPCall(b, func(rt http.RoundTripper) http.RoundTripper { return &floorTransport{c: c, base: rt} }, server, v.traced)
			b.ReportAllocs()
			pairbench.Run(b, bare, with)
		})
	}
}

// startHTTPCall starts a loopback HTTP server whose handler answers "ok" behind
// server (if not nil), and a client of its own connections behind client (if not
// nil), both under otelhttp with a recording SDK when traced, and returns one GET.
func startHTTPCall(b testing.TB, client func(http.RoundTripper) http.RoundTripper, server func(http.Handler) http.Handler, traced bool) func() error {
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	if server != nil {
		h = server(h)
	}
	var rt http.RoundTripper = &http.Transport{MaxIdleConnsPerHost: 4}
	if client != nil {
		rt = client(rt)
	}
	var tp *sdktrace.TracerProvider
	if traced {
		tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		b.Cleanup(func() { tp.Shutdown(context.Background()) })
		h = otelhttp.NewHandler(h, "svc", otelhttp.WithTracerProvider(tp))
		rt = otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(tp))
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(lis)
	b.Cleanup(func() { srv.Close() })
	c := &http.Client{Transport: rt}
	b.Cleanup(c.CloseIdleConnections)
	url := "http://" + lis.Addr().String() + "/item"
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if tp != nil {
			var span trace.Span
			ctx, span = tp.Tracer("bench").Start(ctx, "handle")
			defer span.End()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return err
	}
}

// floorTransport does on an HTTP request what [floorClient] does on a gRPC call,
// and what HTTP adds: the budget written into a copy of the request's header
// (grpc-go writes grpc-timeout itself), the attempt span's trace context injected
// (otelhttp above injected the call span's), and the primary's context kept alive
// until the answer's body is closed.
type floorTransport struct {
	c    *floorClient
	base http.RoundTripper
}

func (t *floorTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c, ctx := t.c, req.Context()
	start := time.Now()
	dl, has := ctx.Deadline()
	left := dl.Sub(start)
	if has && left <= 0 {
		return nil, context.DeadlineExceeded
	}
	w, hedged, host := c.w, true, req.URL.Host
	var circuit *atomic.Int64
	var in *floorInbound
	if c.all {
		// What the stack reads of the request and of the request being served.
		w = c.hostWindow(host)
		circuit = c.circuit(host)
		keyed := req.Header.Get(idempotency.Header) != ""
		in, _ = ctx.Value(floorInboundKey{}).(*floorInbound)
		hedged = (req.Method == http.MethodGet || req.Method == http.MethodHead || keyed) && (in == nil || !in.covered)
		c.tokens.Add(1)
	}
	if hedged {
		_, _ = w.Tracked(start)
	}
	span := trace.SpanFromContext(ctx)
	recording := span.IsRecording()
	var actx context.Context
	var cancel context.CancelFunc
	if c.all && has {
		// The stack's reserve (deadlinekit.DefaultReserve, at most a tenth of the time
		// left): the attempt gives up that much before the call, and tells the next hop.
		reserve := min(deadlinekit.DefaultReserve, time.Duration(float64(left)*deadlinekit.DefaultReserveFraction))
		left -= reserve
		actx, cancel = context.WithDeadline(ctx, dl.Add(-reserve))
	} else {
		actx, cancel = context.WithCancel(ctx)
	}
	if c.armed.CompareAndSwap(false, true) {
		time.AfterFunc(floorDelay, func() { c.armed.Store(false) })
	}
	h := make(http.Header, len(req.Header)+2)
	maps.Copy(h, req.Header)
	h[propagate.HeaderGRPCTimeout] = []string{propagate.EncodeGRPCTimeout(left)}
	if c.wire {
		h[attempts.CoveredHeader] = floorMark
	}
	if in != nil && in.level != "" {
		h[propagate.HeaderCriticality] = []string{in.level}
	}
	var attempt trace.Span
	if recording {
		actx, attempt = span.TracerProvider().Tracer(otelattr.ScopeName).Start(actx, "attempt primary", trace.WithAttributes(
			otelattr.AttemptNumberKey.Int(1), otelattr.AttemptKindKey.String("primary"), attribute.Key("previous-rpc-attempts").Int(0)))
		attempt.SetAttributes(otelattr.BudgetSentKey.Float64(float64(left) / 1e6))
		otel.GetTextMapPropagator().Inject(actx, propagation.HeaderCarrier(h))
	}
	out := req.WithContext(actx)
	out.Header = h
	resp, err := t.base.RoundTrip(out)
	end := time.Now()
	if err == nil && resp.StatusCode < 500 {
		w.Add(end, end.Sub(start))
		c.deposits.Add(1)
		if circuit != nil {
			circuit.Add(1)
		}
	}
	if recording {
		attempt.SetAttributes(otelattr.AttemptOutcomeKey.String("success"))
		attempt.End()
		span.SetAttributes(otelattr.AttemptsKey.Int(1), otelattr.RetryCountKey.Int(0), otelattr.RetryStopReasonKey.String("success"),
			otelattr.HedgeCountKey.Int(0), otelattr.HedgeWonKey.Bool(false))
	}
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// hostWindow is the latency window of the host's calls: a lookup, as a window per
// target costs.
func (c *floorClient) hostWindow(host string) *quantile.Window {
	if w, ok := c.hosts.Load(host); ok {
		return w.(*quantile.Window)
	}
	w, _ := c.hosts.LoadOrStore(host, quantile.New(quantile.Config{Quantile: 0.99}))
	return w.(*quantile.Window)
}

// circuit is the host's circuit, as the breaker keeps one per host: here only the
// count of its successes.
func (c *floorClient) circuit(host string) *atomic.Int64 {
	if v, ok := c.circuits.Load(host); ok {
		return v.(*atomic.Int64)
	}
	v, _ := c.circuits.LoadOrStore(host, new(atomic.Int64))
	return v.(*atomic.Int64)
}

// floorHandlerAll is [floorHandler] with what "fused-all" adds on the server: the
// caller's level, the chain rule's mark, the attempt count and the idempotency key
// read from the header and put with the budget on the handler's context, and the
// handler's duration fed to its route's window, from which the guard learns its
// floor (NewHandler's default).
func floorHandlerAll(next http.Handler) http.Handler {
	inner := floorHandler(next)
	var routes sync.Map // route → the window of its handler's durations (the learned floor)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		win, ok := routes.Load(r.URL.Path)
		if !ok {
			win, _ = routes.LoadOrStore(r.URL.Path, quantile.New(quantile.Config{Quantile: 0.99}))
		}
		_, _ = win.(*quantile.Window).Tracked(start)
		ctx := r.Context()
		in := &floorInbound{Context: ctx, level: r.Header.Get(propagate.HeaderCriticality), keyed: r.Header.Get(idempotency.Header) != ""}
		// retry's server side reads the count whatever the mark says.
		in.covered = attempts.Covers(r.Header.Get(attempts.CoveredHeader), r.Header.Get(attempts.Header))
		inner.ServeHTTP(w, r.WithContext(in))
		end := time.Now()
		win.(*quantile.Window).Add(end, end.Sub(start))
	})
}

// floorMark is the chain rule's mark as a header's values, shared by every request
// of a "fused-wire" floor (a transport below reads the header, never writes it).
var floorMark = []string{attempts.CoveredValue}

// cancelOnClose cancels the primary's context once its answer's body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
	once   sync.Once
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.cancel)
	return err
}

// floorHandler does on an HTTP request what [floorServer] does on a gRPC call, and
// what HTTP adds: the budget read from the header and set on the handler's context
// (grpc-go does both itself).
func floorHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		const floor = time.Millisecond
		vs := r.Header[propagate.HeaderGRPCTimeout]
		if len(vs) != 1 {
			next.ServeHTTP(w, r)
			return
		}
		left, err := propagate.DecodeGRPCTimeout(vs[0])
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		span := trace.SpanFromContext(r.Context())
		if left < floor {
			if span.IsRecording() {
				span.SetAttributes(otelattr.ShortCircuitRejectedKey.Bool(true), otelattr.ShortCircuitFloorKey.Float64(1), otelattr.ShortCircuitRemainingKey.Float64(float64(left)/1e6))
			}
			http.Error(w, "below the floor", http.StatusGatewayTimeout)
			return
		}
		if span.IsRecording() {
			span.SetAttributes(otelattr.BudgetReceivedKey.Float64(float64(left)/1e6), otelattr.BudgetSourceKey.String("grpc-timeout"), otelattr.BudgetClampedKey.Bool(false))
		}
		ctx, cancel := context.WithTimeout(r.Context(), left)
		defer cancel()
		dl, _ := ctx.Deadline()
		next.ServeHTTP(w, r.WithContext(ctx))
		var overrun time.Duration
		if ctx.Err() != nil {
			overrun = max(time.Since(dl), 0)
		}
		if span.IsRecording() {
			span.SetAttributes(otelattr.ServerOverrunKey.Float64(float64(overrun) / 1e6))
		}
	})
}
