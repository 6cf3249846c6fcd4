package detached

import (
	"context"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
)

type Ping struct{}

// A generated gRPC client, as protoc-gen-go-grpc writes it.
type PingClient interface {
	Ping(ctx context.Context, in *Ping, opts ...grpc.CallOption) (*Ping, error)
}

// A generated connect client.
type PingServiceClient interface {
	Ping(ctx context.Context, r *connect.Request[Ping]) (*connect.Response[Ping], error)
}

type key struct{}

func httpHandler(w http.ResponseWriter, r *http.Request) {
	ctx := context.WithoutCancel(r.Context())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://b/", nil) // want `http.NewRequestWithContext is sent a context cut from its caller by context.WithoutCancel \(line 27\), where r.Context\(\) is at hand: the downstream works with no deadline`
	_ = req

	vctx := context.WithValue(ctx, key{}, 1) // derived contexts stay detached
	req = req.WithContext(vctx)              // want `\(\*http.Request\).WithContext is sent a context cut from its caller`
	_ = req.Clone(vctx)                      // want `\(\*http.Request\).Clone is sent`
}

func grpcHandler(ctx context.Context, cc grpc.ClientConnInterface, pc PingClient, cs PingServiceClient, c *connect.Client[Ping, Ping]) error {
	d := context.WithoutCancel(ctx)
	_ = cc.Invoke(d, "/p.P/Ping", nil, nil)                  // want `ClientConnInterface.Invoke is sent a context cut from its caller`
	_, _ = cc.NewStream(d, &grpc.StreamDesc{}, "/p.P/Watch") // want `ClientConnInterface.NewStream is sent`
	_, _ = pc.Ping(d, &Ping{})                               // want `PingClient.Ping is sent`
	_, _ = cs.Ping(d, connect.NewRequest(&Ping{}))           // want `PingServiceClient.Ping is sent`
	_, _ = c.CallUnary(d, connect.NewRequest(&Ping{}))       // want `Client.CallUnary is sent`
	_, _ = pc.Ping(context.WithoutCancel(ctx), &Ping{})      // want `PingClient.Ping is sent a context cut from its caller by context.WithoutCancel, where ctx is at hand`

	// Negatives: the caller's context, one with a deadline of its own again, and
	// a variable given the caller's context back.
	_, _ = pc.Ping(ctx, &Ping{})
	bounded, cancel := context.WithTimeout(d, time.Second)
	defer cancel()
	_, _ = pc.Ping(bounded, &Ping{})
	d = ctx
	_, _ = pc.Ping(d, &Ping{})

	// A new root sent downstream is newroot's finding, reported once, there.
	_, _ = pc.Ping(context.Background(), &Ping{}) // want `context.Background\(\) where ctx is at hand`
	return nil
}

// A goroutine that must outlive its request, accepted with the directive.
func accepted(ctx context.Context, pc PingClient) {
	//deadlinevet:detached the receipt is sent even when the caller gives up
	go func() {
		_, _ = pc.Ping(context.WithoutCancel(ctx), &Ping{})
	}()
	d := context.WithoutCancel(ctx) //deadlinevet:detached the cache fill serves every later caller
	_, _ = pc.Ping(d, &Ping{})
}

// No context at hand: nothing to lose.
func main() {
	var pc PingClient
	_, _ = pc.Ping(context.WithoutCancel(context.Background()), &Ping{})
}
