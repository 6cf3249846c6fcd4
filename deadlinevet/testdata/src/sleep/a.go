package sleep

import (
	"context"
	"errors"
	"net/http"
	"time"
)

type item struct{ n int }

func poll(ctx context.Context) error {
	for i := 0; i < 3; i++ {
		time.Sleep(100 * time.Millisecond) // want `time.Sleep where ctx is at hand sleeps on after the caller gives up; wait in a select on ctx.Done\(\) and a timer`
	}
	return errors.New("gave up")
}

func fetch(ctx context.Context, d time.Duration) (*item, int, string, error) {
	time.Sleep(d) // want `time.Sleep where ctx is at hand`
	return nil, 0, "", nil
}

func handler(w http.ResponseWriter, r *http.Request) {
	time.Sleep(time.Second) // want `time.Sleep where r.Context\(\) is at hand`
}

// No mechanical fix: a struct result, named results.
func value(ctx context.Context) (item, error) {
	time.Sleep(time.Second) // want `time.Sleep where ctx is at hand`
	return item{}, nil
}

func named(ctx context.Context) (err error) {
	time.Sleep(time.Second) // want `time.Sleep where ctx is at hand`
	return nil
}

// Negatives: no context at hand, or a select that already ends with it.
func main() {
	time.Sleep(time.Second)
}

func waits(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Second):
	}
	return nil
}

func blank(_ context.Context) {
	time.Sleep(time.Second)
}

// Accepted with the directive: a demonstration of a server that ignores its caller.
func slowOnPurpose(ctx context.Context) {
	time.Sleep(time.Second) //deadlinevet:detached this server shows what ignoring the deadline costs
}
