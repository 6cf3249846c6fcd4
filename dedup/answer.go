package dedup

import (
	"encoding/binary"
	"errors"
	"net/http"
	"strings"

	"google.golang.org/grpc/metadata"
)

// A stored answer is opaque to the store: one kind byte, then the kind's fields as
// uvarint-prefixed strings and uvarints (an HTTP answer's body is the rest).
const (
	kindHTTP         = 'H' // status, headers, body
	kindHTTPTrailers = 'T' // status, headers, trailers, body
	kindGRPC         = 'G' // message name, message, header, trailer, status
	kindNotKept      = 'N' // completed, not kept: status, size, and the reason when not too large
)

// Why an answer was not kept.
const (
	whyTooLarge   = 0 // above the size limit, or refused by the store for its size
	whyIncomplete = 1 // not delivered in full, or shorter than its Content-Length
)

var (
	errCorrupt        = errors.New("dedup: a stored answer cannot be decoded")
	errNoResponseType = errors.New("dedup: the response type of the procedure is not known on this server yet")
)

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendMD(b []byte, md map[string][]string) []byte {
	b = binary.AppendUvarint(b, uint64(len(md)))
	for k, vs := range md {
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return b
}

// decoder reads what the append functions wrote; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errCorrupt
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errCorrupt
		return nil
	}
	s := d.b[:n:n]
	d.b = d.b[n:]
	return s
}

func (d *decoder) string() string { return string(d.bytes()) }

func (d *decoder) md() map[string][]string {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) { // each entry takes at least one byte
		d.err = errCorrupt
		return nil
	}
	if n == 0 {
		return nil
	}
	md := make(map[string][]string, n)
	for range n {
		k := d.string()
		m := d.uvarint()
		if d.err != nil || m > uint64(len(d.b))+1 {
			d.err = errCorrupt
			return nil
		}
		vs := make([]string, 0, m)
		for range m {
			vs = append(vs, d.string())
		}
		md[k] = vs
	}
	return md
}

// httpAnswer is a stored HTTP answer.
type httpAnswer struct {
	status  int
	header  http.Header
	trailer http.Header
	body    []byte
}

func encodeHTTP(status int, h, trailer http.Header, body []byte) []byte {
	b := appendHTTPHead(make([]byte, 0, 64+len(body)), status, h)
	if len(trailer) > 0 {
		return withTrailers(append(b, body...), len(b), trailer)
	}
	return append(b, body...)
}

// stored reports whether a stored answer keeps the header k: not one of
// [notStored], and not a trailer set with [http.TrailerPrefix].
func stored(k string, vs []string) bool {
	return len(vs) > 0 && !notStored[k] && !strings.HasPrefix(k, http.TrailerPrefix)
}

// appendHTTPHead appends the kind, the status and the headers a stored answer keeps
// ([stored]); the body follows as the rest of the answer. The headers are counted
// as they are written, in one pass over the map: their count's one byte (fewer
// than 128) is set after, and a larger count moves them to make room.
func appendHTTPHead(b []byte, status int, h http.Header) []byte {
	b = append(b, kindHTTP)
	b = binary.AppendUvarint(b, uint64(status))
	at := len(b)
	b = append(b, 0)
	n := 0
	for k, vs := range h {
		if !stored(k, vs) {
			continue
		}
		n++
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	if n < 0x80 {
		b[at] = byte(n)
		return b
	}
	var cnt [binary.MaxVarintLen64]byte
	c := binary.PutUvarint(cnt[:], uint64(n))
	b = append(b, cnt[1:c]...) // room for the bytes the count takes beyond one
	copy(b[at+c:], b[at+1:len(b)-(c-1)])
	copy(b[at:], cnt[:c])
	return b
}

// withTrailers turns ans, an HTTP answer whose head (kind, status, headers) is its
// first head bytes and whose body is the rest, into one that carries trailer too.
func withTrailers(ans []byte, head int, trailer http.Header) []byte {
	b := make([]byte, 0, len(ans)+64)
	b = append(b, kindHTTPTrailers)
	b = append(b, ans[1:head]...)
	b = appendMD(b, trailer)
	return append(b, ans[head:]...)
}

// decodeHTTPInto decodes an HTTP answer (kind H or T), its header into h, and
// returns its status, trailer and body. The header's names and values are
// substrings of one string, and its lists parts of one slice (each with no room
// to grow into the next).
func decodeHTTPInto(b []byte, h http.Header) (int, http.Header, []byte, error) {
	d := decoder{b: b[1:]}
	s := d.uvarint()
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) || s < 100 || s > 999 {
		return 0, nil, nil, errCorrupt
	}
	head, values := d.b, 0
	for range n { // checked and counted first
		d.bytes()
		m := d.uvarint()
		if d.err != nil || m > uint64(len(d.b))+1 {
			return 0, nil, nil, errCorrupt
		}
		for range m {
			d.bytes()
		}
		values += int(m)
	}
	if d.err != nil {
		return 0, nil, nil, errCorrupt
	}
	fillHeader(h, head[:len(head)-len(d.b)], int(n), values)
	var trailer http.Header
	if b[0] == kindHTTPTrailers {
		trailer = d.md()
	}
	if d.err != nil {
		return 0, nil, nil, errCorrupt
	}
	return int(s), trailer, d.b, nil // the body is the rest
}

// fillHeader sets in h the n names of head, an encoded header that decodeHTTPInto
// checked, with their lists of values (values in all).
func fillHeader(h http.Header, head []byte, n, values int) {
	str, vs := string(head), make([]string, values)
	d := decoder{b: head}
	next := func() string {
		l := int(d.uvarint())
		at := len(head) - len(d.b)
		d.b = d.b[l:]
		return str[at : at+l]
	}
	for range n {
		k := next()
		m := int(d.uvarint())
		list := vs[:m:m]
		for i := range list {
			list[i] = next()
		}
		vs = vs[m:]
		h[k] = list
	}
}

// grpcAnswer is a stored gRPC answer.
type grpcAnswer struct {
	msgName         string
	msg             []byte
	header, trailer metadata.MD
	status          []byte // the marshalled google.rpc.Status; empty for OK
}

func encodeGRPC(a *grpcAnswer) []byte {
	b := make([]byte, 0, 64+len(a.msg)+len(a.status))
	b = append(b, kindGRPC)
	b = appendString(b, a.msgName)
	b = appendBytes(b, a.msg)
	b = appendMD(b, a.header)
	b = appendMD(b, a.trailer)
	return appendBytes(b, a.status)
}

// notKept is the record of an answer that was not kept: its status (HTTP status or
// gRPC code), its size, and why (whyTooLarge, whyIncomplete).
type notKept struct {
	status int
	size   int
	why    uint64
}

// encodeNotKept is the record of an answer too large to keep.
func encodeNotKept(status, size int) []byte { return encodeNotKeptWhy(status, size, whyTooLarge) }

// encodeNotKeptWhy writes the reason only when it is not whyTooLarge, so that a
// record of one too large reads the same on a replica that knows no reasons.
func encodeNotKeptWhy(status, size int, why uint64) []byte {
	b := []byte{kindNotKept}
	b = binary.AppendUvarint(b, uint64(status))
	b = binary.AppendUvarint(b, uint64(size))
	if why != whyTooLarge {
		b = binary.AppendUvarint(b, why)
	}
	return b
}

// decodeAnswer returns a *httpAnswer, *grpcAnswer or *notKept.
func decodeAnswer(b []byte) (any, error) {
	if len(b) == 0 {
		return nil, errCorrupt
	}
	d := decoder{b: b[1:]}
	var v any
	switch b[0] {
	case kindHTTP, kindHTTPTrailers:
		a := &httpAnswer{}
		s := d.uvarint()
		a.header = d.md()
		if b[0] == kindHTTPTrailers {
			a.trailer = d.md()
		}
		a.body, d.b = d.b, nil // the body is the rest
		if s < 100 || s > 999 {
			d.err = errCorrupt
		}
		a.status = int(s)
		v = a
	case kindGRPC:
		a := &grpcAnswer{}
		a.msgName = d.string()
		a.msg = d.bytes()
		a.header = d.md()
		a.trailer = d.md()
		a.status = d.bytes()
		v = a
	case kindNotKept:
		s, n := d.uvarint(), d.uvarint()
		var why uint64
		if len(d.b) > 0 {
			why = d.uvarint()
		}
		if s > 1<<16 || n > 1<<62 || why > whyIncomplete {
			d.err = errCorrupt
		}
		v = &notKept{status: int(s), size: int(n), why: why}
	default:
		return nil, errCorrupt
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = errCorrupt
	}
	if d.err != nil {
		return nil, d.err
	}
	return v, nil
}
