package shortcircuit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/otelattr"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// A sheddable flood and a critical one share a limit on a real loopback server built
// with deadlinekit.NewHandler, whose WithCriticality makes /prefetch sheddable: the
// sheddable requests fill the slots and the queue, and each critical request takes a
// sheddable one's place in the queue, the displaced one answered at once with 503,
// when to come back and "the handler did not run"; the critical ones are all served.
// The handler holds its slots until the test lets it go, so nothing depends on
// timing.
func TestCriticalFloodIsServedThroughASheddableOne(t *testing.T) {
	gate := make(chan struct{})
	inside := make(chan string, 64)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		inside <- r.URL.Path
		<-gate
		io.WriteString(w, "done")
	})
	h := deadlinekit.NewHandler(mux,
		deadlinekit.WithShortCircuit(shortcircuit.WithMaxConcurrency(2), shortcircuit.WithQueue(4, shortcircuit.FIFO)),
		deadlinekit.WithCriticality(func(r *http.Request) criticality.Level {
			if strings.HasPrefix(r.URL.Path, "/prefetch") {
				return criticality.Sheddable
			}
			return criticality.Critical
		}))
	// The server span the user's tracing would start, outside the stack.
	spans := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("test")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := tracer.Start(r.Context(), r.URL.Path, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		h.ServeHTTP(w, r.WithContext(ctx))
	}))
	defer srv.Close()
	release := sync.OnceFunc(func() { close(gate) })
	defer release() // before srv.Close, should the test stop early

	type answer struct {
		path, body, retryAfter, unprocessed string
		code                                int
	}
	answers := make(chan answer, 256)
	var wg sync.WaitGroup
	get := func(path string) {
		wg.Go(func() {
			resp, err := srv.Client().Get(srv.URL + path)
			if err != nil {
				t.Error(err)
				answers <- answer{path: path}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			answers <- answer{path, string(b), resp.Header.Get("Retry-After"), resp.Header.Get("Deadlinekit-Unprocessed"), resp.StatusCode}
		})
	}
	// Two sheddable requests take the slots; five more fill the queue of four, and
	// one of the five, whichever arrives last, is refused at once.
	get("/prefetch/a")
	get("/prefetch/b")
	<-inside
	<-inside
	for range 5 {
		get("/prefetch/flood")
	}
	if a := <-answers; a.path != "/prefetch/flood" || a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "the queue full") {
		t.Fatalf("sheddable request into a full limit: %s %d %q", a.path, a.code, a.body)
	}
	// The critical flood: each one displaces a queued sheddable request, which is
	// answered at once.
	const critical = 4
	for range critical {
		get("/checkout")
	}
	for range critical {
		a := <-answers
		if a.path != "/prefetch/flood" || a.code != http.StatusServiceUnavailable || a.retryAfter == "" || a.unprocessed != "1" ||
			!strings.Contains(a.body, "taken by a critical request; come back in") {
			t.Errorf("displaced: %s %d, Retry-After %q, unprocessed %q, %q; want a sheddable one, 503, come back, unprocessed",
				a.path, a.code, a.retryAfter, a.unprocessed, a.body)
		}
	}
	release()
	wg.Wait()
	close(answers)
	served := map[string]int{}
	for a := range answers {
		if a.code != http.StatusOK {
			t.Errorf("%s: %d %q", a.path, a.code, a.body)
		}
		served[a.path]++
	}
	// Each displaced request's span says its level and which level took its place.
	displaced := 0
	for _, sp := range spans.Ended() {
		attrs := attribute.NewSet(sp.Attributes()...)
		if by, ok := attrs.Value(otelattr.ShortCircuitDisplacedByKey); ok {
			displaced++
			if l, _ := attrs.Value(otelattr.CriticalityKey); sp.Name() != "/prefetch/flood" || by.AsString() != "critical" || l.AsString() != "sheddable" {
				t.Errorf("span %s: displaced by %q, level %q; want a sheddable one displaced by a critical one", sp.Name(), by.AsString(), l.AsString())
			}
		}
	}
	if displaced != critical {
		t.Errorf("%d spans say their request was displaced; want %d", displaced, critical)
	}
	if served["/checkout"] != critical || served["/prefetch/a"]+served["/prefetch/b"] != 2 || served["/prefetch/flood"] != 0 {
		t.Errorf("served %v; want every critical request and the two running sheddable ones", served)
	}
}
