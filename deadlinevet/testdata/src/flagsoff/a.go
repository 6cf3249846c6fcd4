package flagsoff

import (
	"context"
	"net/http"
	"time"
)

// With -newroot=false, a new root that reaches an outbound call is still
// detached's finding; one that does not is nobody's.
func handler(w http.ResponseWriter, r *http.Request) {
	ctx := context.Background()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://b/", nil) // want `http.NewRequestWithContext is sent a context cut from its caller by context.Background\(\) \(line 12\)`
	_ = req
	_ = context.TODO()
	time.Sleep(time.Second) // -sleep=false
}
