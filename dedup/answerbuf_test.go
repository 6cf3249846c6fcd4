package dedup_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/deadlinekit/deadlinekit/dedup"
)

// TestStoredAnswerHasNoSpareCapacity: a memory store holds each answer for its whole
// retention, so what it is given is the answer's own bytes, no buffer around them;
// and answers written one after another (the recorder's buffers are reused) are
// each replayed as written.
func TestStoredAnswerHasNoSpareCapacity(t *testing.T) {
	store := dedup.NewMemoryStore()
	h := dedup.NewMiddleware(store)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		if r.URL.Query().Has("trailer") {
			w.Header().Set("Trailer", "X-Sum")
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		for i := range n {
			w.Write([]byte(strings.Repeat(string(rune('a'+i%26)), 100)))
		}
		if r.URL.Query().Has("trailer") {
			w.Header().Set("X-Sum", strconv.Itoa(n))
		}
	}))
	serve := func(key, query string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/?"+query, strings.NewReader("x"))
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	cases := map[string]string{"small": "n=1", "empty": "n=0", "grows": "n=30", "trailer": "n=3&trailer"}
	firsts := map[string]string{}
	for key, q := range cases {
		w := serve(key, q)
		firsts[key] = w.Body.String() + "|" + w.Result().Trailer.Get("X-Sum")
		e, err := store.Get(context.Background(), "0::"+key)
		if err != nil || e.State != dedup.Done {
			t.Fatalf("%s: %+v, %v", key, e, err)
		}
		if cap(e.Answer) != len(e.Answer) {
			t.Errorf("%s: the stored answer has %d bytes in a buffer of %d", key, len(e.Answer), cap(e.Answer))
		}
	}
	for key, q := range cases {
		w := serve(key, q)
		if w.Header().Get(dedup.ReplayedHeader) != "true" || w.Code != http.StatusCreated {
			t.Fatalf("%s: not a replay: %d %v", key, w.Code, w.Header())
		}
		if got := w.Body.String() + "|" + w.Result().Trailer.Get("X-Sum"); got != firsts[key] {
			t.Errorf("%s: replayed %q, first %q", key, got, firsts[key])
		}
	}
}

// TestStoredAnswerOfTheBuffersSize: an answer whose record fills the recorder's
// pooled buffer exactly is stored in a copy of its own, not in the buffer, which goes
// back to the pool: answers written after it (the pool's buffers reused) leave its
// replay as written. The sizes cover every head size up to 300 bytes.
func TestStoredAnswerOfTheBuffersSize(t *testing.T) {
	store := dedup.NewMemoryStore()
	h := dedup.NewMiddleware(store)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte(strings.Repeat(r.URL.Query().Get("c"), n)))
	}))
	serve := func(key string, n int, c string) string {
		r := httptest.NewRequest(http.MethodPost, "/?n="+strconv.Itoa(n)+"&c="+c, strings.NewReader("x"))
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Body.String()
	}
	for n := 700; n <= 1100; n++ {
		for _, c := range []string{"a", "b", "c", "d"} { // the later ones reuse the buffer the first went back in
			serve(strconv.Itoa(n)+c, n, c)
		}
		for _, c := range []string{"a", "b", "c", "d"} {
			if got, want := serve(strconv.Itoa(n)+c, n, c), strings.Repeat(c, n); got != want {
				t.Fatalf("the replay of a %d-byte body of %q: %d bytes %.40q…", n, c, len(got), got)
			}
		}
	}
}
