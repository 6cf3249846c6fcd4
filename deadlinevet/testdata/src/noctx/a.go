package noctx

import (
	"context"
	"database/sql"
	"net"
	"net/http"
	"strings"
)

func handler(w http.ResponseWriter, r *http.Request) {
	resp, _ := http.Get("http://b/") // want `http.Get sends no context where r.Context\(\) is at hand: the call outlives its caller's deadline; build the request with http.NewRequestWithContext`
	_ = resp
	_, _ = http.Post("http://b/", "text/plain", strings.NewReader("x")) // want `http.Post sends no context`
	req, _ := http.NewRequest("GET", "http://b/", nil)                  // want `http.NewRequest sends no context where r.Context\(\) is at hand: the call outlives its caller's deadline; use NewRequestWithContext\(r.Context\(\), ...\)`
	_, _ = http.DefaultClient.Do(req)
	_, _ = http.DefaultClient.Get("http://b/") // want `\(\*http.Client\).Get sends no context`
}

func store(ctx context.Context, db *sql.DB, d *net.Dialer) error {
	_, err := db.Exec("DELETE FROM t") // want `\(\*sql.DB\).Exec sends no context where ctx is at hand.*use ExecContext\(ctx, ...\)`
	_ = db.QueryRow("SELECT 1")        // want `\(\*sql.DB\).QueryRow sends no context`
	_ = db.Ping()                      // want `\(\*sql.DB\).Ping sends no context`
	tx, _ := db.Begin()                // want `\(\*sql.DB\).Begin sends no context.*use BeginTx\(ctx, nil\)`
	_, _ = tx.Exec("SELECT 1")         // want `\(\*sql.Tx\).Exec sends no context`
	c, _ := d.Dial("tcp", "b:1")       // want `\(\*net.Dialer\).Dial sends no context`
	_ = c
	_, _ = net.Dial("tcp", "b:1") // want `net.Dial sends no context.*DialContext`
	return err
}

// Negatives: the context is passed; no context at hand.
func passes(ctx context.Context, db *sql.DB) {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://b/", nil)
	_, _ = http.DefaultClient.Do(req)
	_, _ = db.ExecContext(ctx, "SELECT 1")
}

func main() {
	_, _ = http.Get("http://b/")
	req, _ := http.NewRequest("GET", "http://b/", nil)
	_ = req
}

// A request given the context later, as go-kit's transport does, keeps it; one
// returned, or handed on, may be given it by the function that sends it.
func later(ctx context.Context) {
	req, _ := http.NewRequest("GET", "http://b/", nil)
	_, _ = http.DefaultClient.Do(req.WithContext(ctx))
}

func build(ctx context.Context) (*http.Request, error) {
	req, err := http.NewRequest("GET", "http://b/", nil)
	return req, err
}

func handOn(ctx context.Context, send func(context.Context, *http.Request)) {
	req, _ := http.NewRequest("GET", "http://b/", nil)
	send(ctx, req)
}
