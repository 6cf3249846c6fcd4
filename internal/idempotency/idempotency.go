// Package idempotency decides whether a call may be sent more than once, the
// question packages retry and hedge both ask before repeating a request: by its HTTP
// method (RFC 9110), by the idempotency_level its gRPC method declares in its proto
// descriptor, or because it carries an idempotency key. Options that declare more
// methods belong to each layer; the rules and the names on the wire live here.
package idempotency

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

const (
	// Header is the HTTP header that carries an idempotency key, in canonical form.
	Header = "Idempotency-Key"
	// Key is the gRPC metadata key that carries an idempotency key.
	Key = "idempotency-key"
	// ReplayedHeader marks an HTTP answer as the stored answer of the first request
	// with its key (package dedup sends it as "true"); ReplayedKey is its gRPC
	// header metadata.
	ReplayedHeader = "Idempotent-Replayed"
	ReplayedKey    = "idempotent-replayed"
)

// Method reports whether an HTTP method is safe or idempotent (RFC 9110 §9.2): GET,
// HEAD, OPTIONS, TRACE, PUT, DELETE. The empty method means GET. Methods are case
// sensitive: "get" is not GET.
func Method(m string) bool {
	switch m {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// Keyed reports whether vs, the values of an [Header] header or of [Key] metadata,
// carry an idempotency key: the first value is not blank. A blank key (empty, or
// white space only) is no key: a server cannot deduplicate on it.
func Keyed(vs []string) bool {
	return len(vs) > 0 && strings.TrimSpace(vs[0]) != ""
}

// MaxMethods bounds the number of gRPC methods whose answer [Declared] remembers.
// Method names come from callers, who can invent any number of them: past the
// bound, a method is looked up on every call, and nothing more is kept.
const MaxMethods = 1024

// declared is what [Declared] found for one method.
type declared struct {
	yes bool
	// files is protoregistry.GlobalFiles.NumFiles() before a "no" was looked up: a
	// file registered since may declare the method, so "no" holds only while the
	// registry is unchanged. A "yes" holds for ever (files are never unregistered).
	files int
}

var cache struct {
	m sync.Map // full method name → declared
	n atomic.Int64
}

// Declared reports whether the descriptor of a gRPC method (a full method name,
// "/package.Service/Method"), found in protoregistry.GlobalFiles (filled by generated
// code), declares idempotency_level NO_SIDE_EFFECTS or IDEMPOTENT. A method not
// registered, or a name that is not a method's, is not.
//
// The answer is remembered per method, up to [MaxMethods] methods; a remembered
// "no" is looked up again once a file has been registered since.
func Declared(method string) bool {
	if v, ok := cache.m.Load(method); ok {
		d := v.(declared)
		if d.yes || d.files == protoregistry.GlobalFiles.NumFiles() {
			return d.yes
		}
	}
	full, ok := fullName(method)
	if !ok {
		return false // cheap to tell again, and not worth a place in the cache
	}
	d := declared{files: protoregistry.GlobalFiles.NumFiles()}
	d.yes = lookup(full)
	remember(method, d)
	return d.yes
}

// fullName turns "/package.Service/Method" into the descriptor's full name,
// "package.Service.Method".
func fullName(method string) (protoreflect.FullName, bool) {
	name := strings.TrimPrefix(method, "/")
	i := strings.LastIndexByte(name, '/')
	if i <= 0 {
		return "", false
	}
	full := protoreflect.FullName(name[:i] + "." + name[i+1:])
	return full, full.IsValid()
}

func lookup(full protoreflect.FullName) bool {
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(full)
	if err != nil {
		return false
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return false
	}
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	if !ok || opts == nil {
		return false
	}
	switch opts.GetIdempotencyLevel() {
	case descriptorpb.MethodOptions_NO_SIDE_EFFECTS, descriptorpb.MethodOptions_IDEMPOTENT:
		return true
	}
	return false
}

// remember stores d for method: in place of an answer that went stale, or in a new
// place while fewer than MaxMethods are taken.
func remember(method string, d declared) {
	if _, ok := cache.m.Load(method); ok {
		cache.m.Store(method, d)
		return
	}
	if cache.n.Add(1) > MaxMethods {
		cache.n.Add(-1)
		return
	}
	if _, loaded := cache.m.LoadOrStore(method, d); loaded {
		cache.n.Add(-1)
		cache.m.Store(method, d)
	}
}
