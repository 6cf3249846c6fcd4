package propagate_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/deadlinekit/deadlinekit/propagate"
)

func ExampleEncodeGRPCTimeout() {
	fmt.Println(propagate.EncodeGRPCTimeout(250 * time.Millisecond))
	fmt.Println(propagate.EncodeGRPCTimeout(3 * time.Minute))
	d, err := propagate.DecodeGRPCTimeout("250m")
	fmt.Println(d, err)
	_, err = propagate.DecodeGRPCTimeout("-5m")
	fmt.Println(err)
	// Output:
	// 250000u
	// 180000m
	// 250ms <nil>
	// malformed Grpc-Timeout header "-5m": sign not allowed
}

// A server behind the middleware sees the caller's deadline on its request's context;
// a client through the transport sends the time it has left.
func ExampleNewMiddleware() {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, _ := propagate.InboundFromContext(r.Context())
		left, _ := r.Context().Deadline()
		fmt.Fprintf(w, "budget from %s, at most 1s: %v", in.Source, time.Until(left) <= time.Second)
	})
	srv := httptest.NewServer(propagate.NewMiddleware()(handler))
	defer srv.Close()

	client := &http.Client{Transport: propagate.NewTransport(nil)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(string(body))
	// Output: budget from grpc-timeout, at most 1s: true
}
