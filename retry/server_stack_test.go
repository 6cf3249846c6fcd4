package retry_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
)

// TestMiddlewareInsidePropagate: right inside propagate's middleware, as the stack
// puts it, the handler's context has both layers' state: the caller's budget (its
// deadline and its Inbound) and the mark of a request that is a retry.
func TestMiddlewareInsidePropagate(t *testing.T) {
	var served bool
	h := propagate.NewMiddleware()(retry.NewMiddleware()(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		served = true
		ctx := r.Context()
		if in, ok := propagate.InboundFromContext(ctx); !ok || in.Budget != 2*time.Second || in.Source != propagate.SourceGRPCTimeout {
			t.Errorf("Inbound %+v, %v; want 2s from grpc-timeout", in, ok)
		}
		if _, ok := ctx.Deadline(); !ok {
			t.Error("no deadline on the handler's context")
		}
		if !retry.ServingRetry(ctx) {
			t.Error("a retried request is not marked serving a retry")
		}
	})))
	req := httptest.NewRequest(http.MethodGet, "/item", nil)
	req.Header.Set(propagate.HeaderGRPCTimeout, "2S")
	req.Header.Set("Grpc-Previous-Rpc-Attempts", "1")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if !served {
		t.Fatal("handler not called")
	}
}
