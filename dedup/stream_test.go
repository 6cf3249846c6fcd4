package dedup_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit/dedup"
)

type strMsg = wrapperspb.StringValue

// TestKeyedStreamsPassThrough: a keyed client stream or bidi stream (connect-go,
// in the gRPC and Connect protocols) behind the HTTP dedup is not held back until
// its request ends: a bidi stream whose client waits for an answer after each
// message goes on, and a stream is not stored: a repeat runs again.
func TestKeyedStreamsPassThrough(t *testing.T) {
	for _, proto := range []struct {
		name string
		opt  []connect.ClientOption
	}{{"grpc", []connect.ClientOption{connect.WithGRPC()}}, {"connect", nil}} {
		t.Run(proto.name, func(t *testing.T) {
			var bidiRuns, clientRuns atomic.Int64
			mux := http.NewServeMux()
			mux.Handle("/chat.Chat/Talk", connect.NewBidiStreamHandler("/chat.Chat/Talk", func(ctx context.Context, s *connect.BidiStream[strMsg, strMsg]) error {
				i := bidiRuns.Add(1)
				for {
					m, err := s.Receive()
					if errors.Is(err, io.EOF) {
						return nil
					}
					if err != nil {
						return err
					}
					if err := s.Send(wrapperspb.String(fmt.Sprint("run ", i, ": ", m.GetValue()))); err != nil {
						return err
					}
				}
			}))
			mux.Handle("/up.Up/Load", connect.NewClientStreamHandler("/up.Up/Load", func(ctx context.Context, s *connect.ClientStream[strMsg]) (*connect.Response[strMsg], error) {
				i := clientRuns.Add(1)
				n := 0
				for s.Receive() {
					n++
				}
				return connect.NewResponse(wrapperspb.String(fmt.Sprint("run ", i, ": ", n, " messages"))), s.Err()
			}))
			srv := serveHTTPStack(t, mux)
			hc := h2cClient(t, true)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a safety net: a held stream fails here
			defer cancel()

			talk := connect.NewClient[strMsg, strMsg](hc, srv.URL+"/chat.Chat/Talk", proto.opt...)
			for run := int64(1); run <= 2; run++ {
				s := talk.CallBidiStream(ctx)
				s.RequestHeader().Set("Idempotency-Key", "chat")
				for _, m := range []string{"hello", "again"} {
					if err := s.Send(wrapperspb.String(m)); err != nil {
						t.Fatal(err)
					}
					got, err := s.Receive() // wait for the answer before sending more
					if err != nil {
						t.Fatalf("bidi run %d: %v", run, err)
					}
					if want := fmt.Sprint("run ", run, ": ", m); got.GetValue() != want {
						t.Fatalf("bidi: %q, want %q", got.GetValue(), want)
					}
				}
				s.CloseRequest()
				if _, err := s.Receive(); !errors.Is(err, io.EOF) {
					t.Fatalf("bidi end: %v", err)
				}
				s.CloseResponse()
			}

			load := connect.NewClient[strMsg, strMsg](hc, srv.URL+"/up.Up/Load", proto.opt...)
			for run := int64(1); run <= 2; run++ {
				s := load.CallClientStream(ctx)
				s.RequestHeader().Set("Idempotency-Key", "upload")
				for range 3 {
					if err := s.Send(wrapperspb.String("row")); err != nil {
						t.Fatal(err)
					}
				}
				resp, err := s.CloseAndReceive()
				if err != nil {
					t.Fatalf("client stream run %d: %v", run, err)
				}
				if want := fmt.Sprint("run ", run, ": 3 messages"); resp.Msg.GetValue() != want || resp.Header().Get("Idempotent-Replayed") != "" {
					t.Fatalf("client stream: %q %v, want %q, not replayed", resp.Msg.GetValue(), resp.Header(), want)
				}
			}
			if bidiRuns.Load() != 2 || clientRuns.Load() != 2 {
				t.Fatalf("streams ran %d and %d times, want 2 and 2", bidiRuns.Load(), clientRuns.Load())
			}
		})
	}
}

// TestUpgradeNotStored: a keyed request whose handler switched protocols (101) or
// hijacked the connection left no HTTP answer to store: its key is released and a
// repeat runs, instead of replaying an empty 200.
func TestUpgradeNotStored(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first func(w http.ResponseWriter)
	}{
		{"hijack", func(w http.ResponseWriter) {
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			defer conn.Close()
			brw.WriteString("HTTP/1.1 202 Accepted\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
			brw.Flush()
		}},
		{"101", func(w http.ResponseWriter) {
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "echo")
			w.WriteHeader(http.StatusSwitchingProtocols)
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			defer conn.Close()
			brw.WriteString("echo\n")
			brw.Flush()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) == 1 {
					tc.first(w)
					return
				}
				w.WriteHeader(http.StatusCreated)
			})
			srv := serve(t, h, dedup.NewMemoryStore())
			req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
			req.Header.Set("Idempotency-Key", "k")
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "echo")
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			line, _ := bufio.NewReader(resp.Body).ReadString('\n')
			resp.Body.Close()
			if resp.StatusCode == 200 || line == "" {
				t.Fatalf("first: %d %q", resp.StatusCode, line)
			}
			a := post(t, srv.URL, "k", "")
			if a.status != http.StatusCreated || a.replayed || n.Load() != 2 {
				t.Fatalf("repeat after an upgrade: %d (replayed %v), ran %d; want 201 from a second run", a.status, a.replayed, n.Load())
			}
		})
	}
}
