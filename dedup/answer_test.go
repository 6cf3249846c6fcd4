package dedup

import (
	"bytes"
	"fmt"
	"net/http"
	"reflect"
	"testing"
)

// A store returns what it was given, but a user's store (or a corrupted table) may
// return anything: decoding never panics, and what encodes decodes back.
func FuzzDecodeAnswer(f *testing.F) {
	f.Add(encodeHTTP(201, http.Header{"Content-Type": {"application/json"}, "X-A": {"1", "2"}}, nil, []byte(`{"ok":true}`)))
	f.Add(encodeHTTP(200, http.Header{"Trailer": {"Grpc-Status"}}, http.Header{"Grpc-Status": {"0"}, "X-L": {"a", "b"}}, []byte{0, 0, 0, 0, 1, 'x'}))
	f.Add(encodeNotKeptWhy(200, 36<<10, whyIncomplete))
	f.Add(encodeGRPC(&grpcAnswer{msgName: "google.protobuf.StringValue", msg: []byte{10, 1, 'x'}, header: map[string][]string{"a": {"b"}}}))
	f.Add(encodeNotKept(200, 1<<20))
	f.Add([]byte{})
	f.Add([]byte{'H', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeAnswer(b)
		if err != nil {
			if v != nil {
				t.Fatal("a value with an error")
			}
		}
		_, _, _, _ = decodeHTTPInto(append([]byte{kindHTTP}, b...), http.Header{})
		_, _, _, _ = decodeHTTPInto(append([]byte{kindHTTPTrailers}, b...), http.Header{})
		if a, ok := v.(*httpAnswer); ok {
			again := encodeHTTP(a.status, a.header, a.trailer, a.body)
			h := http.Header{}
			s, trailer, body, err := decodeHTTPInto(again, h)
			kept := 0 // a header without values, or one never stored, is not written back
			for k, vs := range a.header {
				if stored(k, vs) {
					kept++
				}
			}
			if err != nil || s != a.status || !bytes.Equal(body, a.body) || len(h) != kept || len(trailer) != len(a.trailer) {
				t.Fatalf("re-encoded answer decodes to %d %q %v %v, %v", s, body, h, trailer, err)
			}
		}
		if a, ok := v.(*notKept); ok {
			if w, err := decodeAnswer(encodeNotKeptWhy(a.status, a.size, a.why)); err != nil || *w.(*notKept) != *a {
				t.Fatalf("re-encoded record decodes to %v, %v; want %v", w, err, a)
			}
		}
	})
}

func TestDecodeHostile(t *testing.T) {
	for _, b := range [][]byte{
		nil, {'X'}, {'H'}, {'H', 99}, {'H', 0xe8, 0x07}, // status 1000
		{'H', 0xc8, 0x01, 3, 1, 'a'},           // three headers announced, one short one there
		append(encodeGRPC(&grpcAnswer{}), 0),   // trailing byte
		{'H', 200, 1, 5, 'a'},                  // a name longer than what is left
		{'N', 0xff, 0xff, 0xff, 0xff, 0x0f, 0}, // status out of range
		{'G', 5, 'a'},
	} {
		if v, err := decodeAnswer(b); err == nil {
			t.Errorf("%q decoded to %#v", b, v)
		}
	}
}

// TestReplayedHeaderListsGrowApart: a replayed header's lists share one slice; a
// layer that adds a value to one list must not write over the next one's.
func TestReplayedHeaderListsGrowApart(t *testing.T) {
	for range 20 { // the names are encoded in the map's order
		h := http.Header{}
		if _, _, _, err := decodeHTTPInto(encodeHTTP(200, http.Header{"A": {"1"}, "B": {"2"}, "C": {"3"}}, nil, nil), h); err != nil {
			t.Fatal(err)
		}
		h.Add("A", "a")
		h.Add("B", "b")
		h.Add("C", "c")
		if want := (http.Header{"A": {"1", "a"}, "B": {"2", "b"}, "C": {"3", "c"}}); !reflect.DeepEqual(h, want) {
			t.Fatalf("after adding a value to each: %v, want %v", h, want)
		}
	}
}

// An answer's head keeps every stored header and its count, however many there
// are: the count takes one byte below 128 and more from there.
func TestHeadCountsItsHeaders(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 129, 300, 20000} {
		h := http.Header{"Date": {"today"}, "Trailer:X": {"t"}, "Empty": {}}
		for i := range n {
			h[fmt.Sprintf("X-%d", i)] = []string{fmt.Sprint(i), "v"}
		}
		got := http.Header{}
		s, _, body, err := decodeHTTPInto(encodeHTTP(203, h, nil, []byte("body")), got)
		delete(h, "Trailer:X")
		delete(h, "Empty")
		for k := range notStored {
			delete(h, k)
		}
		if err != nil || s != 203 || string(body) != "body" || !reflect.DeepEqual(got, h) {
			t.Fatalf("%d headers: decoded %d %q, %d headers, %v", n, s, body, len(got), err)
		}
	}
}
