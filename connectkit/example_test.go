package connectkit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/deadlinekit/deadlinekit"
	"github.com/deadlinekit/deadlinekit/connectkit"
	"github.com/deadlinekit/deadlinekit/deadline"
)

// A connect handler and client with the stack: the handler sees the caller's budget
// less the client's reserve (100 ms here), and a call with less than the reserve and
// the floor left is refused before it is sent. (With generated code, pass the options to the generated
// constructors: pingv1connect.NewPingServiceClient(hc, url, connectkit.ClientOption()).)
func Example() {
	mux := http.NewServeMux()
	mux.Handle("/pkg.Store/Get", connect.NewUnaryHandler("/pkg.Store/Get",
		func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			left, _ := deadline.Remaining(ctx)
			return connect.NewResponse(wrapperspb.String(fmt.Sprint("at most 900ms left: ", left <= 900*time.Millisecond))), nil
		}, connectkit.HandlerOption()))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](
		srv.Client(), srv.URL+"/pkg.Store/Get", connectkit.ClientOption(deadlinekit.WithReserve(100*time.Millisecond)))
	for _, budget := range []time.Duration{time.Second, 10 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		resp, err := client.CallUnary(ctx, connect.NewRequest(wrapperspb.String("x")))
		cancel()
		if err != nil {
			fmt.Println(budget, connect.CodeOf(err))
			continue
		}
		fmt.Println(budget, resp.Msg.GetValue())
	}
	// Output:
	// 1s at most 900ms left: true
	// 10ms deadline_exceeded
}
