package shortcircuit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

// A report that takes about a second to build: the request with 250 ms left is
// refused before the handler runs, the one with 10 s left is served.
func Example() {
	var stats shortcircuit.Counter
	guard := shortcircuit.NewMiddleware(
		shortcircuit.WithFloor(time.Second),
		shortcircuit.WithObserver(stats.Observe),
	)
	h := guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "report ready")
	}))

	for _, budget := range []time.Duration{250 * time.Millisecond, 10 * time.Second} {
		// In a server, package propagate puts the caller's deadline on the context.
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/report", nil).WithContext(ctx))
		cancel()

		body := strings.TrimSpace(w.Body.String())
		if _, reason, refused := strings.Cut(body, " left, "); refused {
			body = "… left, " + reason // the time left varies by a few µs
		}
		fmt.Println(budget, w.Code, body)
	}
	s := stats.Stats()
	fmt.Println("admitted", s.Admitted, "refused", s.Refused())
	// Output:
	// 250ms 504 … left, floor 1s: request refused before the handler ran
	// 10s 200 report ready
	// admitted 1 refused 1
}

// A gRPC server with per-method floors and an adaptive floor: each method's floor is
// the larger of its entry in the map and the P5 of its recent successful calls.
func ExampleUnaryServerInterceptor() {
	floors := map[string]time.Duration{
		"/shop.Cart/Checkout": 80 * time.Millisecond,
		"/shop.Cart/Get":      5 * time.Millisecond,
	}
	opts := []shortcircuit.Option{
		shortcircuit.WithFloorFunc(func(method string) time.Duration { return floors[method] }),
		shortcircuit.WithAdaptiveFloor(shortcircuit.DefaultAdaptive),
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(shortcircuit.UnaryServerInterceptor(opts...)),
		grpc.ChainStreamInterceptor(shortcircuit.StreamServerInterceptor(opts...)),
	)
	defer srv.Stop()
	// Register services and Serve as usual.
}

// Inside a handler, before a step that needs 20 ms.
func ExampleCheck() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()

	if err := shortcircuit.Check(ctx, 20*time.Millisecond); err != nil {
		var be *shortcircuit.BudgetError
		errors.As(err, &be)
		fmt.Println(errors.Is(err, shortcircuit.ErrInsufficientBudget), be.Needed)
		return // a gRPC handler returns err: the interceptor answers DeadlineExceeded
	}
	// Output: true 20ms
}

// One slot, taken: a request with 30 ms left would wait for the slot (about one
// service time, 20 ms) and then work 20 ms more, so it is refused at once, before it
// queues; one with 10 s left waits its turn.
func ExampleWithMaxConcurrency() {
	release := make(chan struct{})
	h := shortcircuit.NewMiddleware(
		shortcircuit.WithFloor(20*time.Millisecond), // the work takes at least 20 ms
		shortcircuit.WithMaxConcurrency(1),
	)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-release
		}
		fmt.Fprint(w, "done")
	}))
	serve := func(path string, budget time.Duration) *httptest.ResponseRecorder {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil))
		return rec
	}
	held := make(chan *httptest.ResponseRecorder)
	go func() { held <- serve("/hold", 10*time.Second) }()
	for {
		// Wait until the first request has the slot. (On a busy machine a request
		// may reach the guard with less than the floor left, and be refused for
		// that instead: try again.)
		if rec := serve("/", 30*time.Millisecond); strings.Contains(rec.Body.String(), "cannot finish in time") {
			fmt.Println(rec.Code, strings.Contains(rec.Body.String(), "cannot finish in time"), rec.Header().Get("grpc-retry-pushback-ms"))
			break
		}
	}
	waited := make(chan *httptest.ResponseRecorder)
	go func() { waited <- serve("/", 10*time.Second) }()
	// Released at once: the request with 10 s left either waits in the queue for
	// the slot or, arriving after, finds it free; it is served either way.
	close(release)
	fmt.Println((<-held).Code, (<-waited).Code)
	// Output:
	// 504 true -1
	// 200 200
}
