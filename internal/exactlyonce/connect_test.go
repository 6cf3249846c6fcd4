package exactlyonce_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync/atomic"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/dedup"
)

// connectProc is the procedure the connect replicas serve: the gRPC replicas' method,
// so that a key's requests fingerprint alike over gRPC and connect, and a key sent
// over either runs once.
const connectProc = "/grpc.testing.TestService/UnaryCall"

// wires are the protocols connect-go speaks, as the history names them.
var wires = map[string]connect.ClientOption{
	"connect": connect.WithClientOptions(),
	"grpc":    connect.WithGRPC(),
	"grpcweb": connect.WithGRPCWeb(),
}

// drawWire draws the protocol of a connect call.
func drawWire(rng *rand.Rand) string {
	switch x := rng.IntN(100); {
	case x < 50:
		return "connect"
	case x < 80:
		return "grpc"
	}
	return "grpcweb"
}

// h2c is the protocols of the connect servers and clients: unencrypted HTTP/2 (the
// gRPC protocol needs it) and HTTP/1.1.
func h2c(http1 bool) *http.Protocols {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	p.SetHTTP1(http1)
	return &p
}

// serveConnect serves replica i's connect handler on l, with dedup on store (the
// store of the replica's HTTP and gRPC servers, under the same scope), and returns
// what stops it. Its outermost layers are faultHandler (the tenant, and cuts) and
// connectFaults (a panic as Internal, as the gRPC replicas answer it).
func serveConnect(h recorder, store dedup.Store, i string, l net.Listener) func() {
	dopts := []dedup.Option{dedup.WithScope(tenantOf), dedup.WithMaxResponseSize(maxResponse), dedup.WithLeaseMargin(leaseMargin)}
	svc := &service{h: h, replica: "connect-" + i}
	mux := http.NewServeMux()
	mux.Handle(connectProc, connect.NewUnaryHandler(connectProc, svc.connectCall,
		connect.WithInterceptors(connectFaults{}),
		connectkit.HandlerOption(deadlinekit.WithDedup(store, dopts...))))
	srv := &http.Server{Handler: faultHandler(mux), Protocols: h2c(true), ErrorLog: log.New(io.Discard, "", 0)}
	done := make(chan struct{})
	go func() { _ = srv.Serve(l); close(done) }()
	return func() { srv.Close(); <-done }
}

// connectFaults is a connect replica's outermost interceptor: a handler's panic is
// answered Internal, as the gRPC replicas answer it (connect-go does not recover).
type connectFaults struct{}

func (connectFaults) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (resp connect.AnyResponse, err error) {
		defer func() {
			if p := recover(); p != nil {
				resp, err = nil, connect.NewError(connect.CodeInternal, fmt.Errorf("panic: %v", p))
			}
		}()
		return next(ctx, req)
	}
}

func (connectFaults) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (connectFaults) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// connectCall is the service's handler over connect. Its answer's metadata goes, by
// the execution's parity, on the response (or the error), or through the call's
// CallInfo: dedup keeps both.
func (s *service) connectCall(ctx context.Context, req *connect.Request[testgrpc.SimpleRequest]) (*connect.Response[testgrpc.SimpleResponse], error) {
	var p plan
	if err := json.Unmarshal(req.Msg.GetPayload().GetBody(), &p); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("bad plan: "+err.Error()))
	}
	key := strings.Trim(req.Header().Get("Idempotency-Key"), `"`)
	e := s.h.beginExec(ctx, tenantOf(ctx), key, "connect", s.replica)
	a, released := s.outcome(ctx, e, p, true)
	s.h.endExec(e, a, released)
	if released == "panic" {
		panic("exactlyonce: the planned panic")
	}
	info, _ := connect.CallInfoForHandlerContext(ctx)
	viaCall := info != nil && e.ID%2 == 1
	if codes.Code(a.Status) != codes.OK {
		ce := connect.NewError(connect.Code(a.Status), errors.New(string(a.Body)))
		if viaCall {
			addHeader(info.ResponseHeader(), a.Header)
			addHeader(info.ResponseTrailer(), a.Trailer)
		} else {
			addHeader(ce.Meta(), a.Header)
			addHeader(ce.Meta(), a.Trailer)
		}
		return nil, ce
	}
	resp := connect.NewResponse(&testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: a.Body}})
	if viaCall {
		addHeader(info.ResponseHeader(), a.Header)
		addHeader(info.ResponseTrailer(), a.Trailer)
	} else {
		addHeader(resp.Header(), a.Header)
		addHeader(resp.Trailer(), a.Trailer)
	}
	return resp, nil
}

func addHeader(h http.Header, m map[string][]string) {
	for k, vs := range m {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
}

// lowerKeys is h with its names in lower case, as gRPC metadata names them.
func lowerKeys(h http.Header) map[string][]string {
	out := make(map[string][]string, len(h))
	for k, vs := range h {
		out[strings.ToLower(k)] = append(out[strings.ToLower(k)], vs...)
	}
	return out
}

type connectClient = connect.Client[testgrpc.SimpleRequest, testgrpc.SimpleResponse]

// connectClients builds the stack's connect clients, one per protocol (retry with
// generated keys, hedging, faultRT beneath choosing the replica of each attempt),
// and the raw ones, one per protocol and replica.
func (c *cluster) connectClients(stack []deadlinekit.Option, seed uint64, rate float64) {
	stackTr := &http.Transport{MaxIdleConnsPerHost: 64, Protocols: h2c(false)}
	rawTr := &http.Transport{MaxIdleConnsPerHost: 64, Protocols: h2c(false)}
	raw1 := &http.Transport{MaxIdleConnsPerHost: 64} // HTTP/1.1, for the Connect and gRPC-Web protocols
	c.closers = append(c.closers, stackTr.CloseIdleConnections, rawTr.CloseIdleConnections, raw1.CloseIdleConnections)
	stackHC := &http.Client{Transport: &truncRT{&faultRT{name: "connect", h: c.h, seed: seed, rate: rate, hosts: c.conns, base: stackTr}}}
	c.stackConnect, c.rawConnect = map[string]*connectClient{}, map[string][]*connectClient{}
	for name, opt := range wires {
		c.stackConnect[name] = connect.NewClient[testgrpc.SimpleRequest, testgrpc.SimpleResponse](stackHC,
			"http://"+c.conns[0]+connectProc, opt, connectkit.ClientOption(stack...))
		for _, host := range c.conns {
			tr := rawTr
			if name != "grpc" && len(c.rawConnect[name])%2 == 1 {
				tr = raw1
			}
			hc := &http.Client{Transport: &truncRT{tr}}
			c.rawConnect[name] = append(c.rawConnect[name], connect.NewClient[testgrpc.SimpleRequest, testgrpc.SimpleResponse](hc, "http://"+host+connectProc, opt))
		}
	}
}

// truncKey is the context key of a call whose answer's body the client's transport
// cuts after so many bytes (a *truncation).
type truncKey struct{}

type truncation struct {
	n   int
	cut atomic.Bool // the body was longer: the client read a part
}

// truncRT cuts the body of an answer as the call's truncation says: the connect
// client reads a part of it, then an unexpected end.
type truncRT struct{ base http.RoundTripper }

func (t *truncRT) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if tr, _ := req.Context().Value(truncKey{}).(*truncation); tr != nil && err == nil {
		resp.Body = &cutBody{ReadCloser: resp.Body, left: tr.n, tr: tr}
	}
	return resp, err
}

type cutBody struct {
	io.ReadCloser
	left int
	tr   *truncation
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		n, err := b.ReadCloser.Read(p[:min(len(p), 1)])
		if n == 0 {
			return 0, err // the body was no longer: the client read it whole
		}
		b.tr.cut.Store(true)
		return 0, io.ErrUnexpectedEOF
	}
	n, err := b.ReadCloser.Read(p[:min(len(p), b.left)])
	b.left -= n
	return n, err
}

// sendConnect makes one connect call for l in protocol wire, through the stack
// (via "stack") or a raw client of a replica drawn from rng, and returns what the
// client saw, as sendGRPC reads it: an error is an answer with its code and message.
func (r *run) sendConnect(ctx context.Context, l *logical, key, via, wire string, truncate int, rng *rand.Rand) seen {
	client := r.c.stackConnect[wire]
	if via != "stack" {
		cs := r.c.rawConnect[wire]
		i, ok := ctx.Value(replicaKey{}).(int)
		if !ok {
			i = rng.IntN(len(cs))
		}
		client = cs[i]
	}
	var tr *truncation
	if truncate > 0 {
		tr = &truncation{n: truncate}
		ctx = context.WithValue(ctx, truncKey{}, tr)
	}
	req := connect.NewRequest(&testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: l.Body}})
	req.Header().Set("X-Tenant", l.Scope)
	if key != "" {
		req.Header().Set("Idempotency-Key", key)
	}
	resp, err := client.CallUnary(ctx, req)
	if tr != nil && tr.cut.Load() {
		r.h.count("connect truncated body")
		return seen{Err: fmt.Sprintf("the client read %d bytes of the answer: %v", tr.n, err)}
	}
	var s seen
	var hdr, trl map[string][]string
	if err == nil {
		s.Ans.Body = resp.Msg.GetPayload().GetBody()
		hdr, trl = lowerKeys(resp.Header()), lowerKeys(resp.Trailer())
		s.ExecID = execOf(s.Ans.Body, strings.Join(hdr["x-app-exec"], ","))
	} else {
		ce := new(connect.Error)
		if !errors.As(err, &ce) {
			return seen{Err: err.Error()}
		}
		s.Ans.Status, s.Ans.Body = int(ce.Code()), []byte(ce.Message())
		hdr = lowerKeys(ce.Meta()) // an error's header and trailer, in one
		s.ExecID = execOf(s.Ans.Body, "")
	}
	all := metadata.Join(hdr, trl)
	s.Replayed = len(all[dedup.ReplayedKey]) > 0 && all[dedup.ReplayedKey][0] == "true"
	s.Ans.Header = appHeaders(all, "x-app-exec", "x-app-kind")
	s.Ans.Trailer = appHeaders(all, "x-app-trailer")
	if via == "stack" && err != nil {
		s.Ans.Status, s.Ans.Body, s.Annotated = unannotate(s.Ans.Status, s.Ans.Body)
	}
	s.Wire = wire
	return s
}

// wireOf names the protocol of a call: connect's wire after the protocol.
func wireOf(s seen) string {
	if s.Proto == "connect" {
		return "connect/" + s.Wire
	}
	return s.Proto
}
