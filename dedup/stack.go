package dedup

import (
	"context"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/internal/handlerwork"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
	"github.com/deadlinekit/deadlinekit/internal/rpc"
)

// Where dedup sits in the server stack: propagate → retry's server side →
// shortcircuit (the guard) → dedup → handler. Two layers outside it need to hear
// from it, and it from them, through package handlerwork:
//
//   - The guard admitted the request and holds a concurrency slot and a clock for
//     it. A replay, a repeat waiting for the first, and dedup's own refusals are
//     not the handler's work: they free the slot and teach the guard nothing
//     ([idle], [core.notWork]). A repeat that waited and then takes the key over
//     runs the handler only if the guard admits it again; refused, it releases the
//     lease it took and records nothing ([core.workHTTP], [core.workGRPC],
//     [core.workRPC]).
//   - Retry's server side answers a failure "do not retry" (grpc-retry-pushback-ms:
//     -1) when the handler's own retry layers gave up; the answer stored is the one
//     the first caller received, so it carries that too ([doNotRetryWriter],
//     [sentTrailer], [sentMeta]).
//
// And an answer that tells the caller to come back later (a 503 or 429 with
// Retry-After, a gRPC Unavailable or ResourceExhausted with a non-negative pushback)
// is not final: the key is released, so that coming back runs the handler
// ([comeBackHTTP], [comeBackGRPC]).

// idle tells the guard that the request in ctx is, from now on, not the handler's
// work (it waits for the first request with its key): its slot goes back.
func idle(ctx context.Context) { handlerwork.Idle(ctx) }

// notWork tells the guard that a request reported with outcome was answered
// without the handler: every outcome but a run of it ("first", "released"), and a
// store failure after which the handler runs anyway ([WithRunWithoutStore]).
func (c *core) notWork(ctx context.Context, outcome string) {
	switch outcome {
	case outFirst, outReleased:
		return
	case outUnavailable:
		if c.c.runWithoutStore {
			return
		}
	}
	handlerwork.Idle(ctx)
}

// resuming returns the guard of ctx when the request was idle (it waited) and is
// about to run the handler: it must be admitted again first.
func resuming(ctx context.Context) handlerwork.Guard {
	if g := handlerwork.GuardFrom(ctx); g != nil && g.Idling() {
		return g
	}
	return nil
}

// underRetry reports whether retry's server side is outside: its "do not retry"
// must then be in the answer stored.
func underRetry(ctx context.Context) bool {
	_, ok := ctx.Value(handlerwork.InboundKey{}).(handlerwork.Retries)
	return ok
}

// workHTTP is next for the request r whose run is rc (nil: it runs without a
// lease): admitted again by the guard when it waited first (refused: the guard's
// refusal is the answer, and the key is released), and writing through a
// [doNotRetryWriter] under retry's server side. It is next itself when neither
// applies.
func (c *core) workHTTP(r *http.Request, rc *runContext, next http.Handler) http.Handler {
	ctx := r.Context()
	g, relay := resuming(ctx), underRetry(ctx)
	if g == nil && !relay {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g != nil && !g.Resume(r.Context()) {
			if rc != nil {
				rc.forgot.Store(true) // record nothing
			}
			g.RefuseHTTP(w)
			return
		}
		if relay {
			w = &doNotRetryWriter{ResponseWriter: w, ctx: r.Context()}
		}
		next.ServeHTTP(w, r)
	})
}

// workGRPC is handler, admitted again by the guard when the call waited first; rc
// is the call's run (nil: it runs without a lease).
func (c *core) workGRPC(ctx context.Context, rc *runContext, handler grpc.UnaryHandler) grpc.UnaryHandler {
	g := resuming(ctx)
	if g == nil {
		return handler
	}
	return func(ctx context.Context, req any) (any, error) {
		if !g.Resume(ctx) {
			if rc != nil {
				rc.forgot.Store(true)
			}
			md, err := g.Refusal()
			_ = grpc.SetTrailer(ctx, md)
			return nil, err
		}
		return handler(ctx, req)
	}
}

// workRPC is handle, admitted again by the guard when the call waited first; rc
// is the call's run (nil: it runs without a lease).
func (c *core) workRPC(ctx context.Context, rc *runContext, handle rpc.Handle) rpc.Handle {
	g := resuming(ctx)
	if g == nil {
		return handle
	}
	return func(ctx context.Context) (any, error) {
		if !g.Resume(ctx) {
			if rc != nil {
				rc.forgot.Store(true)
			}
			md, err := g.Refusal()
			return nil, &rpc.Refusal{Err: err, Meta: md}
		}
		return handle(ctx)
	}
}

// doNotRetryWriter adds grpc-retry-pushback-ms: -1 to a failure answer when the
// handler's outbound retry layers gave up, before the answer is recorded: the
// header retry's server side adds outside, so that the stored answer has it too.
type doNotRetryWriter struct {
	http.ResponseWriter
	ctx   context.Context
	wrote bool
}

func (w *doNotRetryWriter) WriteHeader(code int) {
	if !w.wrote && code >= 200 {
		w.wrote = true
		if handlerwork.FailureStatus(code) && handlerwork.GaveUp(w.ctx) {
			w.Header().Set(pushback.Key, pushback.DoNotRetry)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *doNotRetryWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes the underlying writer when it can.
func (w *doNotRetryWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets [http.ResponseController] reach the underlying writer.
func (w *doNotRetryWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// sentTrailer is the trailer the caller of a gRPC call that ended with err
// receives, from the trailer its handler set: with grpc-retry-pushback-ms: -1 alone
// when err is a failure and the handler's retry layers gave up (what retry's server
// interceptor sends).
func sentTrailer(ctx context.Context, err error, trailer metadata.MD) metadata.MD {
	if err == nil || !handlerwork.GaveUp(ctx) {
		return trailer
	}
	md := trailer.Copy()
	md.Set(pushback.Key, pushback.DoNotRetry)
	return md
}

// sentMeta is the metadata of a failure's answer that a framework's caller
// (package connectkit) receives: meta, with grpc-retry-pushback-ms: -1 when the
// handler's retry layers gave up.
func sentMeta(ctx context.Context, meta metadata.MD) metadata.MD {
	return sentTrailer(ctx, errFailed, meta)
}

var errFailed = status.Error(codes.Unknown, "failed")

// comeBackHTTP reports whether an answer with status and header tells its caller
// to come back later: 503 or 429 with Retry-After or a non-negative
// grpc-retry-pushback-ms, and no "do not retry". Such an answer is not final.
func comeBackHTTP(status int, h http.Header) bool {
	if status != http.StatusServiceUnavailable && status != http.StatusTooManyRequests {
		return false
	}
	if v := h.Values(pushback.Key); len(v) > 0 {
		_, err := pushback.ParseMs(v[len(v)-1])
		return err == nil
	}
	return h.Get(pushback.RetryAfterKey) != ""
}

// comeBackGRPC reports whether a gRPC answer with st, whose handler set trailer,
// tells its caller to come back later: Unavailable or ResourceExhausted with a
// non-negative grpc-retry-pushback-ms (or, without one, a google.rpc.RetryInfo), as
// the caller receives it (not "do not retry" because the handler's retries gave
// up). Such an answer is not final.
func comeBackGRPC(ctx context.Context, st *status.Status, trailer metadata.MD) bool {
	if st.Code() != codes.Unavailable && st.Code() != codes.ResourceExhausted {
		return false
	}
	md := sentTrailer(ctx, st.Err(), trailer)
	if v := md.Get(pushback.Key); len(v) > 0 {
		_, err := pushback.ParseMs(v[len(v)-1])
		return err == nil
	}
	_, found, err := pushback.RetryInfoDelay(st)
	return found && err == nil
}
