package newroot

import (
	"context"
	"net/http"

	"google.golang.org/grpc"
)

func call(ctx context.Context) error { return nil }

// Positives: a context is at hand.

func withParam(ctx context.Context) error {
	return call(context.Background()) // want `context.Background\(\) where ctx is at hand: the caller's deadline is lost here; use ctx`
}

func withTODO(ctx context.Context, n int) error {
	c := context.TODO() // want `context.TODO\(\) where ctx is at hand`
	return call(c)
}

func handler(w http.ResponseWriter, r *http.Request) {
	_ = call(context.Background()) // want `context.Background\(\) where r.Context\(\) is at hand`
}

type server struct{}

func (s *server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	_ = call(context.Background()) // want `where req.Context\(\) is at hand`
}

func (s *server) Watch(in *string, stream grpc.ServerStream) error {
	return call(context.Background()) // want `where stream.Context\(\) is at hand`
}

func closure(ctx context.Context) {
	f := func() error {
		return call(context.Background()) // want `where ctx is at hand`
	}
	_ = f()
}

// Shadowed: still reported, but no fix, for ctx means something else here.
func shadowed(ctx context.Context) {
	{
		ctx := 3
		_ = ctx
		_ = call(context.Background()) // want `where ctx is at hand`
	}
}

// Negatives.

func main() {
	_ = call(context.Background())
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		_ = call(r.Context())
	})
}

func init() {
	_ = call(context.TODO())
}

func noContext(n int) error {
	return call(context.Background())
}

// A function literal with its own context parameter uses that one.
func ownParam(ctx context.Context) {
	run(func(ctx context.Context) error {
		return call(ctx)
	})
	run(func(inner context.Context) error {
		return call(context.Background()) // want `where inner is at hand`
	})
}

func run(f func(context.Context) error) { _ = f(context.Background()) }

// A context parameter named _, or unnamed, says the function does not use one.
func blank(_ context.Context, n int) error {
	return call(context.Background())
}

func unnamed(context.Context) error {
	return call(context.Background())
}

func blankLiteral(ctx context.Context) {
	run(func(_ context.Context) error {
		return call(context.Background())
	})
}

// Accepted with the directive, with a reason.
func accepted(ctx context.Context) error {
	//deadlinevet:detached the cache refresh is shared by every caller
	return call(context.Background())
}

func acceptedTrailing(ctx context.Context) error {
	return call(context.Background()) //deadlinevet:detached the cache refresh is shared by every caller
}

// A function literal the function returns or stores runs after it returned,
// when its context may be gone: it sees none at hand.
func returnsStop(ctx context.Context) func() {
	stop := func() {
		_ = call(context.Background())
	}
	return stop
}

func returnsLiteral(ctx context.Context) func() error {
	return func() error { return call(context.Background()) }
}

type hooks struct{ onStop func() }

func stores(ctx context.Context) hooks {
	return hooks{onStop: func() { _ = call(context.Background()) }}
}

// A nil context defaulted is no context lost.
func nilDefault(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	return call(ctx)
}

// After the context at hand has ended, the shutdown needs a context of its own.
func shutdownAfterDone(ctx context.Context, srv *http.Server) {
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	select {
	case <-ctx.Done():
		_ = srv.Shutdown(context.Background())
	}
}
