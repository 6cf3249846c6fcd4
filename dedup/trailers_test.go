package dedup_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/dedup"
)

// h2cProtocols serves and dials HTTP/1.1 and unencrypted HTTP/2.
func h2cProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

// serveStack serves h behind deadlinekit.NewHandler with dedup on a memory store,
// over HTTP/1.1 and unencrypted HTTP/2.
func serveHTTPStack(t *testing.T, h http.Handler, opts ...dedup.Option) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(deadlinekit.NewHandler(h, deadlinekit.WithDedup(dedup.NewMemoryStore(), opts...)))
	srv.Config.Protocols = h2cProtocols()
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// h2cClient is an HTTP client that speaks unencrypted HTTP/2 (h2 true) or HTTP/1.1.
func h2cClient(t *testing.T, h2 bool) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	if h2 {
		tr.Protocols.SetUnencryptedHTTP2(true)
	} else {
		tr.Protocols.SetHTTP1(true)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// TestConnectTrailersReplayed: a connect-go handler behind deadlinekit.NewHandler
// with WithDedup (no connectkit option): in the gRPC protocol its status travels in
// the trailers, so a replay without them is a protocol error. The repeat gets the
// message, the header and the trailer of the first, in every protocol.
func TestConnectTrailersReplayed(t *testing.T) {
	for _, proto := range []struct {
		name string
		opt  []connect.ClientOption
	}{{"grpc", []connect.ClientOption{connect.WithGRPC()}}, {"grpcweb", []connect.ClientOption{connect.WithGRPCWeb()}}, {"connect", nil}} {
		t.Run(proto.name, func(t *testing.T) {
			var n atomic.Int64
			const proc = "/pay.Payments/Charge"
			mux := http.NewServeMux()
			mux.Handle(proc, connect.NewUnaryHandler(proc,
				func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
					i := n.Add(1)
					if req.Msg.GetValue() == "decline" {
						return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("declined %d", i))
					}
					resp := connect.NewResponse(wrapperspb.String(fmt.Sprint("charge ", i, " of ", req.Msg.GetValue())))
					resp.Header().Set("X-Charge", fmt.Sprint(i))
					resp.Trailer().Set("X-Ledger", fmt.Sprint("entry-", i))
					return resp, nil
				}))
			srv := serveHTTPStack(t, mux)
			client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](h2cClient(t, true), srv.URL+proc, proto.opt...)
			call := func(key, msg string) (*connect.Response[wrapperspb.StringValue], error) {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				req := connect.NewRequest(wrapperspb.String(msg))
				req.Header().Set("Idempotency-Key", key)
				return client.CallUnary(ctx, req)
			}
			for i := range 3 {
				resp, err := call("k", "100")
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if resp.Msg.GetValue() != "charge 1 of 100" || resp.Header().Get("X-Charge") != "1" || resp.Trailer().Get("X-Ledger") != "entry-1" {
					t.Fatalf("call %d: %q header %v trailer %v", i, resp.Msg.GetValue(), resp.Header(), resp.Trailer())
				}
				if replayed := resp.Header().Get("Idempotent-Replayed") == "true"; replayed != (i > 0) {
					t.Fatalf("call %d: replayed %v", i, replayed)
				}
			}
			_, err1 := call("d", "decline")
			_, err2 := call("d", "decline")
			if connect.CodeOf(err1) != connect.CodeFailedPrecondition || connect.CodeOf(err2) != connect.CodeFailedPrecondition ||
				err2.Error() != err1.Error() {
				t.Fatalf("declines: %v, then %v", err1, err2)
			}
			if n.Load() != 2 {
				t.Fatalf("ran %d times, want 2", n.Load())
			}
		})
	}
}

// TestGRPCServeHTTPTrailersReplayed: a grpc-go server mounted on the mux through its
// ServeHTTP declares its status trailers in the Trailer header and sets them after
// the body; its metadata trailers use http.TrailerPrefix. A repeat gets them all.
func TestGRPCServeHTTPTrailersReplayed(t *testing.T) {
	svc := &grpcCharges{}
	gs := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(gs, svc)
	defer gs.Stop()
	mux := http.NewServeMux()
	mux.Handle("/grpc.testing.TestService/", gs)
	srv := serveHTTPStack(t, mux)
	cc, err := grpc.NewClient(strings.TrimPrefix(srv.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := testgrpc.NewTestServiceClient(cc)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		a := unary(ctx, c, "k", "100")
		if a.err != nil || a.resp.GetUsername() != "charge 1" || first(a.header.Get("x-charge")) != "1" || first(a.trailer.Get("x-ledger")) != "entry-1" {
			t.Fatalf("call %d: %+v", i, a)
		}
		if a.replayed != (i > 0) {
			t.Fatalf("call %d: replayed %v", i, a.replayed)
		}
	}
	if svc.n.Load() != 1 {
		t.Fatalf("ran %d times", svc.n.Load())
	}
}

// TestHTTPTrailersReplayed: a plain handler's trailers, declared in the Trailer
// header and set after the body, or set with http.TrailerPrefix, are stored and
// replayed equal, over HTTP/1.1 and HTTP/2.
func TestHTTPTrailersReplayed(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprint("h2=", h2), func(t *testing.T) {
			var n atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				i := n.Add(1)
				w.Header().Set("Trailer", "X-Checksum, X-Rows")
				w.Header().Set("Content-Type", "text/csv")
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, "row %d\n", i)
				w.Header().Set("X-Checksum", fmt.Sprint("sum-", i))
				w.Header()["X-Rows"] = []string{"1", "one"}
				w.Header().Set(http.TrailerPrefix+"X-Late", fmt.Sprint("late-", i))
			})
			srv := serveHTTPStack(t, h)
			client := h2cClient(t, h2)
			get := func() (*http.Response, string) {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/export", strings.NewReader("q"))
				req.Header.Set("Idempotency-Key", "k")
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				return resp, string(b)
			}
			r1, b1 := get()
			r2, b2 := get()
			want := http.Header{"X-Checksum": {"sum-1"}, "X-Rows": {"1", "one"}, "X-Late": {"late-1"}}
			if !reflect.DeepEqual(r1.Trailer, want) {
				t.Fatalf("first's trailer %v, want %v", r1.Trailer, want)
			}
			if r2.StatusCode != 201 || b2 != b1 || r2.Header.Get("Idempotent-Replayed") != "true" || !reflect.DeepEqual(r2.Trailer, r1.Trailer) {
				t.Fatalf("repeat: %d %q trailer %v header %v; first: %q trailer %v", r2.StatusCode, b2, r2.Trailer, r2.Header, b1, r1.Trailer)
			}
			if n.Load() != 1 {
				t.Fatalf("ran %d times", n.Load())
			}
		})
	}
}

// TestHTTPPrefixTrailersReplayedOverHTTP1: a handler that declares no Trailer header,
// flushes its one small write and sets its trailers with http.TrailerPrefix (as
// connect-go and grpc-go's ServeHTTP do) gets them to an HTTP/1.1 caller, chunked; its
// replay must too, though the replay's one write would get a Content-Length.
func TestHTTPPrefixTrailersReplayedOverHTTP1(t *testing.T) {
	var n atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1)
		w.Header().Set("Content-Type", "application/grpc")
		fmt.Fprintf(w, "msg %d", i)
		http.NewResponseController(w).Flush()
		w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
	})
	srv := serveHTTPStack(t, h)
	client := h2cClient(t, false)
	get := func() *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/pay.Payments/Charge", strings.NewReader("q"))
		req.Header.Set("Idempotency-Key", "k")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if _, err := io.ReadAll(resp.Body); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	r1, r2 := get(), get()
	if r1.Trailer.Get("Grpc-Status") != "0" {
		t.Fatalf("first's trailer %v", r1.Trailer)
	}
	if r2.Header.Get("Idempotent-Replayed") != "true" || !reflect.DeepEqual(r2.Trailer, r1.Trailer) {
		t.Fatalf("repeat's trailer %v (header %v), first's %v", r2.Trailer, r2.Header, r1.Trailer)
	}
}
