package record

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/deadlinekit/deadlinekit/internal/cancelbody"
	"github.com/deadlinekit/deadlinekit/otelattr"
)

// Call is the span of one outbound call, shared by the layers it goes through. The
// outermost layer starts it ([StartCall]) and ends it; the layers beneath join it
// and record into it. Its zero value (the call is not traced) does nothing.
type Call struct {
	c     *callState
	owner bool
}

// callState is what the layers of one call record, written on the call's span when
// the call ends: each key once, meaning one thing.
type callState struct {
	span   trace.Span
	own    bool            // the span was started here, and is ended here
	caller context.Context // the caller's context: a call it cancelled is no error

	seq        atomic.Int32 // attempt numbers handed out
	once       sync.Once    // the call ends
	totalsOnce sync.Once    // its totals are written on its span

	mu         sync.Mutex
	retried    bool // the retry layer reported
	attempts   int  // attempts the retry layer made
	stop       StopReason
	hedged     bool // the hedging layer reported
	hedges     int
	won        bool
	skip       HedgeSkip
	budget     float64
	budgetSent bool
	keyHash    string        // the call's idempotency key's hash, if it has one
	dedupSeen  bool          // an attempt's dedup answer was recorded
	replayed   bool          // the last such answer was a replay
	conflict   bool          // an attempt met a conflict
	comeBack   time.Duration // the last conflict's come-back
	resends    int           // copies the transport beneath sent again by itself
	hedgesSeen int           // hedges already set against header writes (TransportResends)
}

// callKey holds the *callState of the call a context belongs to.
type callKey struct{}

// StartCall returns the call that ctx belongs to, joining it when a layer above has
// started one (the context's span is the call's span or one of its attempts'), and
// otherwise starting it: the span in ctx is used as the call's span when it is a
// client span made for this call (otelhttp's transport, grpc-go's OpenTelemetry
// plugin, which gRFC A72 has start a call span in an interceptor); else a client
// span of its own is started, named as gRFC A72 names call spans ("Sent." and the
// method, dots for slashes) for gRPC and by the method for HTTP ("GET"). A server
// span, or a user's span made for something else, never receives a call's totals.
//
// name is the gRPC full method or the HTTP method. With no recording span in ctx,
// nothing is started and the Call does nothing. The layer that started the call
// ends it ([Call.End]); a joining layer's End does nothing.
func StartCall(ctx context.Context, p Protocol, name string) (context.Context, Call) {
	// The span first: an untraced call (the usual one) then costs one context
	// lookup, not two. A call to join has a recording span: its own or its
	// attempt's, ended only once every layer of the call has started.
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return ctx, Call{}
	}
	if c := callFrom(ctx); c != nil {
		return ctx, Call{c: c}
	}
	cc := &callContext{}
	c := &cc.st
	c.span, c.caller = span, ctx
	if !isClientSpan(span) || isAttempt(ctx, span) {
		ctx, c.span = span.TracerProvider().Tracer(otelattr.ScopeName).Start(ctx, callSpanName(p, name), clientSpan...)
		c.own = true
	}
	cc.Context = ctx
	return cc, Call{c: c, owner: true}
}

// clientSpan is the start option of a call span, made once.
var clientSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// callContext is a call's context, its state under callKey ([stateContext]).
type callContext = stateContext[callKey, callState]

// isClientSpan reports whether span says it is a client span. Spans of the OTel SDK
// do (their SpanKind method); any other span is taken not to be one, so that the
// toolkit starts a call span of its own rather than write on a span it cannot tell.
func isClientSpan(span trace.Span) bool {
	k, ok := span.(interface{ SpanKind() trace.SpanKind })
	return ok && k.SpanKind() == trace.SpanKindClient
}

func callSpanName(p Protocol, name string) string {
	if p == GRPC {
		if v, ok := grpcSpanNames.Load(name); ok {
			return v.(string)
		}
		n := "Sent." + strings.ReplaceAll(strings.TrimPrefix(name, "/"), "/", ".")
		if grpcSpanNameCount.Load() < maxGRPCSpanNames {
			if _, loaded := grpcSpanNames.LoadOrStore(name, n); !loaded {
				grpcSpanNameCount.Add(1)
			}
		}
		return n
	}
	if name == "" {
		return "GET"
	}
	return name
}

// grpcSpanNames remembers the call span name of each gRPC method met (building it
// takes two allocations), up to maxGRPCSpanNames methods: a client calls a few
// methods again and again, and a client that calls too many (the names come from
// the caller) builds the others each time.
var (
	grpcSpanNames     sync.Map // full method → call span name
	grpcSpanNameCount atomic.Int32
)

const maxGRPCSpanNames = 1024

// callFrom returns the call ctx belongs to, as [StartCall] would join it.
func callFrom(ctx context.Context) *callState {
	c, ok := ctx.Value(callKey{}).(*callState)
	if !ok {
		return nil
	}
	if span := trace.SpanFromContext(ctx); c.span != span && !isAttempt(ctx, span) {
		return nil
	}
	return c
}

// Recording reports whether the call is traced.
func (c Call) Recording() bool { return c.c != nil }

// Owner reports whether this layer started the call, and so ends it.
func (c Call) Owner() bool { return c.owner }

// Started reports whether this layer started the call's span itself (no client span
// of the user's was made for the call): then nothing above has written its trace
// context into the request, and the layer must ([InjectHTTP]).
func (c Call) Started() bool { return c.owner && c.c.own }

// End writes the call's totals on its span and, when the toolkit started the span,
// ends it, with err (when not nil) as its error; a call its caller cancelled is no
// error ([CallerCanceled]), its span ends with an event saying so. Only the layer that started the call
// does this; End may be called more than once, the first call counts.
func (c Call) End(err error) {
	if c.c == nil || !c.owner {
		return
	}
	c.c.once.Do(func() { c.c.end(err) })
}

// EndHTTP ends an HTTP call ([Call.End]) when its response is done with. The call's
// totals are final when the round trip returns, and are written then: a span of the
// user's (otelhttp's) ends when the caller closes the body, before the layers beneath
// see the Close, so totals written later would land on an ended span. A span the
// toolkit started ends at once when there is no body to read (or err is set), else
// when the body is closed or read to its end, so that it covers the answer's
// transfer. A status of 400 or more marks it an error, as OTel's conventions ask of
// client spans.
func (c Call) EndHTTP(resp *http.Response, err error) {
	if c.c == nil || !c.owner {
		return
	}
	if err != nil || resp == nil || !c.c.own {
		c.End(err)
		return
	}
	var status error
	if resp.StatusCode >= 400 {
		status = statusError(resp.StatusCode)
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		c.End(status)
		return
	}
	c.c.totalsOnce.Do(c.c.writeTotals)
	resp.Body = cancelbody.Wrap(resp.Body, func() { c.End(status) })
}

// RoundTripHTTP runs rt, the round trip of an HTTP call whose span this layer holds,
// and ends the call with its answer ([Call.EndHTTP]). When rt panics (a user's
// observer or classifier, the base transport), the call's span ends at once, an
// error saying that the call panicked, and the panic goes on: no span stays open.
// Every layer that starts an HTTP call ends it through here.
func (c Call) RoundTripHTTP(rt func() (*http.Response, error)) (*http.Response, error) {
	returned := false
	defer func() {
		if !returned {
			c.End(ErrPanicked)
		}
	}()
	resp, err := rt()
	returned = true
	c.EndHTTP(resp, err)
	return resp, err
}

// Unary runs f, a unary call (gRPC, connect) whose span this layer holds, and ends
// the call with f's error ([Call.End]); when f panics the call's span ends at once,
// an error saying that the call panicked, and the panic goes on.
func (c Call) Unary(f func() error) error {
	returned := false
	defer func() {
		if !returned {
			c.End(ErrPanicked)
		}
	}()
	err := f()
	returned = true
	c.End(err)
	return err
}

// ErrPanicked is the error of a call span whose call panicked.
var ErrPanicked = errors.New("deadlinekit: the call panicked")

// statusError is an HTTP failure status, for a call span's status.
type statusError int

// StatusError is the error of an HTTP answer with a failure status, for a span's
// status: "HTTP 503 Service Unavailable".
func StatusError(code int) error { return statusError(code) }

// Error is "HTTP 503 Service Unavailable", as retry's StatusError says it.
func (e statusError) Error() string {
	if text := http.StatusText(int(e)); text != "" {
		return "HTTP " + strconv.Itoa(int(e)) + " " + text
	}
	return "HTTP " + strconv.Itoa(int(e))
}

func (c *callState) end(err error) {
	c.totalsOnce.Do(c.writeTotals)
	if !c.own {
		return
	}
	switch {
	case err == nil:
	case CallerCanceled(c.caller):
		c.span.AddEvent(callerCanceledEvent, trace.WithAttributes(exceptionMessageKey.String(err.Error())))
	default:
		c.span.RecordError(err)
		c.span.SetStatus(codes.Error, err.Error())
	}
	c.span.End()
}

// writeTotals writes what the layers recorded of the call on its span.
func (c *callState) writeTotals() {
	c.mu.Lock()
	attempts := 1
	if c.retried {
		attempts = max(c.attempts, 1)
	}
	kv := make([]attribute.KeyValue, 0, 8)
	kv = append(kv, otelattr.AttemptsKey.Int(attempts+c.hedges+c.resends))
	if c.retried {
		kv = append(kv, otelattr.RetryCountKey.Int(attempts-1), otelattr.RetryStopReasonKey.String(string(c.stop)))
	}
	if c.hedged {
		if c.hedges > 0 {
			kv = append(kv, otelattr.HedgeCountKey.Int(c.hedges), otelattr.HedgeWonKey.Bool(c.won))
		} else if c.skip != "" {
			kv = append(kv, otelattr.HedgeSkipKey.String(string(c.skip)))
		}
	}
	if c.budgetSent {
		kv = append(kv, otelattr.BudgetSentKey.Float64(c.budget))
	}
	if c.keyHash != "" {
		kv = append(kv, otelattr.IdempotencyKeyHashKey.String(c.keyHash))
	}
	if c.dedupSeen {
		kv = append(kv, dedupAttrs(c.replayed, c.conflict, c.comeBack)...)
	}
	c.mu.Unlock()
	c.span.SetAttributes(kv...)
}

// nextAttempt returns the number of the call's next attempt, 1 for the first.
func (c *callState) nextAttempt() int { return int(c.seq.Add(1)) }

func (c *callState) recordRetry(attempts int, stop StopReason) {
	c.mu.Lock()
	c.retried, c.attempts, c.stop = true, attempts, stop
	c.mu.Unlock()
}

func (c *callState) recordHedge(hedges int, won bool, skip HedgeSkip) {
	c.mu.Lock()
	c.hedged = true
	c.hedges += hedges
	c.won = won
	if hedges == 0 && c.skip == "" {
		c.skip = skip
	}
	c.mu.Unlock()
}

func (c *callState) recordBudget(ms float64) {
	c.mu.Lock()
	if !c.budgetSent {
		c.budget, c.budgetSent = ms, true
	}
	c.mu.Unlock()
}
