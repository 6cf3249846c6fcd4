package newrootgo

import (
	"context"
	"net/http"
)

func audit(ctx context.Context, what string) {}

func handler(w http.ResponseWriter, r *http.Request) {
	go func() {
		audit(context.Background(), "seen") // want `context.Background\(\) in a goroutine started where r.Context\(\) is at hand`
	}()
	// A goroutine that must outlive its request says so, and why.
	//deadlinevet:detached the audit record is written even when the caller has gone
	go func() {
		audit(context.Background(), "kept")
	}()
}
