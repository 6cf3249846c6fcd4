package connectkit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
)

// user (connect client) → gateway (connect handler) → inventory (HTTP). Post writes
// through to inventory, Get answers by itself. With inventory down or failing, the
// write runs once at every hop, the gateway's relayed failure keeps one value per
// signal, and the user's breaker never opens on the gateway.
func TestConnectChainRelay(t *testing.T) {
	for _, c := range []struct {
		name string
		inv  http.HandlerFunc // nil: a closed port
	}{
		{"inventory answers 503", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", http.StatusServiceUnavailable) }},
		{"inventory dead", nil},
	} {
		for _, p := range protocols {
			t.Run(c.name+"/"+p.name, func(t *testing.T) {
				var invRuns, gwRuns atomic.Int32
				invURL := "http://" + testkit.ClosedAddr(t)
				if c.inv != nil {
					srv := httptest.NewServer(deadlinekit.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						invRuns.Add(1)
						c.inv(w, r)
					})))
					t.Cleanup(srv.Close)
					invURL = srv.URL
				}
				toInv := &http.Client{Transport: deadlinekit.NewTransport(nil)}
				t.Cleanup(toInv.CloseIdleConnections)
				gw, hc := serve(t, func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
					if req.Spec().Procedure != procPost {
						return ok(ctx, req)
					}
					gwRuns.Add(1)
					hreq, _ := http.NewRequestWithContext(ctx, http.MethodPost, invURL+"/reserve", strings.NewReader("tea"))
					resp, err := toInv.Do(hreq)
					if err := deadlinekit.FromHTTP(resp, err); err != nil {
						return nil, connectkit.Error(err)
					}
					resp.Body.Close()
					return ok(ctx, req)
				}, connectkit.HandlerOption())
				opt := connectkit.ClientOption()
				post := client(hc, gw, procPost, p.opt, opt)
				get := client(hc, gw, procGet, p.opt, opt)
				for i := range 40 {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					_, err := post.CallUnary(ctx, connect.NewRequest(wrapperspb.String("order")))
					cancel()
					if errors.Is(err, breaker.ErrOpen) {
						t.Fatalf("order %d: the user's circuit on the gateway opened: %v", i, err)
					}
					var ce *connect.Error
					if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable {
						t.Fatalf("order %d: %v; want Unavailable", i, err)
					}
					if v := ce.Meta().Values("Grpc-Retry-Pushback-Ms"); len(v) > 1 {
						t.Fatalf("order %d: %d values of grpc-retry-pushback-ms: %q", i, len(v), v)
					}
					// The gateway is up: its failure is inventory's, and says so, so
					// that the user's breaker (its throttle too) counts the gateway
					// as answering.
					if v := ce.Meta().Values("Deadlinekit-Relayed"); len(v) != 1 || v[0] != "1" {
						t.Fatalf("order %d: deadlinekit-relayed %q; want one 1 (meta %v)", i, v, ce.Meta())
					}
				}
				if n := gwRuns.Load(); n != 40 {
					t.Errorf("the gateway's handler ran %d times for 40 writes; want 40", n)
				}
				// inventory's 503 says nothing of coming back: the gateway's own
				// circuit on it opens after its first failures, and no write ran
				// there twice.
				if c.inv != nil && (invRuns.Load() == 0 || invRuns.Load() > 40) {
					t.Errorf("inventory's handler ran %d times for 40 writes; want 1 to 40", invRuns.Load())
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if _, err := get.CallUnary(ctx, connect.NewRequest(wrapperspb.String("x"))); err != nil {
					t.Errorf("Get on the healthy gateway: %v", err)
				}
			})
		}
	}
}
