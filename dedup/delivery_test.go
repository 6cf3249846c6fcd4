package dedup_test

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deadlinekit/deadlinekit/dedup"
)

const (
	downloadSize = 768 << 10 // the answer
	readBefore   = 36 << 10  // what the client reads of it before its connection breaks
	firstPart    = 64 << 10  // what the handler writes before the client leaves
)

var download = bytes.Repeat([]byte("0123456789abcdef"), downloadSize/16)

// brokenDownload sends a keyed POST, reads 36 KB of the answer and closes the
// connection, as a client whose download broke.
func brokenDownload(t *testing.T, url, key string) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader("order 7"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, readBefore)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // before the end: the transport closes the connection
}

// downloader writes the answer's first part, waits until the server has seen its
// client leave, and writes the rest in 16 KB writes: stopping at the first write
// error, or going on regardless.
type downloader struct {
	setLength  bool
	ignoreErrs bool
	oneWrite   bool // the rest in one write
	runs       atomic.Int64
	writeErr   atomic.Bool   // a write failed (the test's premise)
	done       chan struct{} // closed when the first execution returns
}

func (d *downloader) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.runs.Add(1) > 1 {
		http.Error(w, "ran again", http.StatusTeapot)
		return
	}
	defer close(d.done)
	if d.setLength {
		w.Header().Set("Content-Length", strconv.Itoa(len(download)))
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(download[:firstPart])
	http.NewResponseController(w).Flush()
	<-r.Context().Done() // the client left
	rest := download[firstPart:]
	step := 16 << 10
	if d.oneWrite {
		step = len(rest)
	}
	for i := 0; i < len(rest); i += step {
		if _, err := w.Write(rest[i : i+step]); err != nil {
			d.writeErr.Store(true)
			if !d.ignoreErrs {
				return
			}
		}
	}
}

// TestBrokenDownloadRepeat: a client reads 36 KB of a 768 KB answer, its connection
// breaks, and it comes back with the same key. The handler ran once, and the repeat
// gets either the whole answer the handler wrote (when the handler wrote it all and
// its Content-Length proves it complete) or a refusal saying it was not kept: never
// the part that got through presented as a complete, replayed 200.
func TestBrokenDownloadRepeat(t *testing.T) {
	for _, tc := range []struct {
		name  string
		d     *downloader
		whole bool // the repeat gets the whole answer
	}{
		{"stops on error", &downloader{}, false},
		{"stops on error, Content-Length", &downloader{setLength: true}, false},
		{"ignores errors", &downloader{ignoreErrs: true}, false}, // complete, but nothing proves it
		{"ignores errors, Content-Length", &downloader{setLength: true, ignoreErrs: true}, true},
		{"one write, Content-Length", &downloader{setLength: true, oneWrite: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(t, tc.d, dedup.NewMemoryStore())
			tc.d.done = make(chan struct{})
			brokenDownload(t, srv.URL+"/exports", "k")
			<-tc.d.done // a repeat that came earlier would wait for it
			if !tc.d.writeErr.Load() {
				t.Fatal("no write failed after the client left: the test proves nothing")
			}
			a := post(t, srv.URL+"/exports", "k", "order 7")
			if tc.d.runs.Load() != 1 {
				t.Fatalf("the handler ran %d times", tc.d.runs.Load())
			}
			if tc.whole {
				if a.status != 200 || !a.replayed || a.body != string(download) {
					t.Fatalf("repeat: %d, replayed %v, %d bytes; want the whole answer of %d bytes", a.status, a.replayed, len(a.body), len(download))
				}
				return
			}
			if a.status != http.StatusGone || a.replayed || !strings.Contains(a.body, "not delivered in full") {
				t.Fatalf("repeat: %d, replayed %v, %d bytes %.200q; want 410 saying the answer was not kept", a.status, a.replayed, len(a.body), a.body)
			}
		})
	}
}

// TestContentLengthMismatchNotKept: a handler that declared a Content-Length and
// wrote fewer bytes sent a truncated answer (the server closes the connection): it
// is not stored as the answer.
func TestContentLengthMismatchNotKept(t *testing.T) {
	var n atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Length", "1000")
		w.Write([]byte("only ten b"))
	})
	srv := serve(t, h, dedup.NewMemoryStore())
	if a := post(t, srv.URL, "k", ""); a.body != "only ten b" {
		t.Fatalf("first: %+v", a)
	}
	a := post(t, srv.URL, "k", "")
	if a.status != http.StatusGone || a.replayed || n.Load() != 1 {
		t.Fatalf("repeat: %d (replayed %v) %q, ran %d; want 410, once", a.status, a.replayed, a.body, n.Load())
	}
}
