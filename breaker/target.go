package breaker

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc"
)

// Call describes a call to a [KeyFunc].
type Call struct {
	// Target is the default circuit name: "https://example.com:443" (HTTP), the
	// ClientConn's target (gRPC).
	Target string
	// Method is the HTTP method, or the gRPC full method ("/pkg.Service/Method").
	Method string
	// Request is the HTTP request (nil for gRPC); Conn the gRPC ClientConn (nil for
	// HTTP). Neither may be modified.
	Request *http.Request
	Conn    *grpc.ClientConn
}

// KeyFunc names the circuit a call goes through: return c.Target + c.Method for
// per-method breaking, a peer's address for per-peer breaking. The empty string
// means c.Target.
type KeyFunc func(ctx context.Context, c Call) string

// name is the circuit name of k.
func (k key) name() string {
	switch k.kind {
	case keyHTTP:
		return TargetName(k.a, k.b)
	case keyEndpoint:
		return k.a + "@" + k.b
	}
	return k.b
}

// httpCircuit returns the circuit of an HTTP request, nil when it goes unbroken.
func (b *Breaker) httpCircuit(req *http.Request) *circuit {
	var scheme, host string
	if req.URL != nil {
		scheme, host = req.URL.Scheme, req.URL.Host
	}
	if f := b.cfg.key; f != nil {
		target := TargetName(scheme, host)
		return b.circuit(key{kind: keyCustom, b: orDefault(f(req.Context(), Call{Target: target, Method: req.Method, Request: req}), target)})
	}
	return b.circuit(key{kind: keyHTTP, a: scheme, b: host})
}

// grpcCircuit returns the circuit of a gRPC call, nil when it goes unbroken.
func (b *Breaker) grpcCircuit(ctx context.Context, cc *grpc.ClientConn, method string) *circuit {
	var target string
	if cc != nil {
		target = cc.Target()
	}
	if f := b.cfg.key; f != nil {
		return b.circuit(key{kind: keyCustom, b: orDefault(f(ctx, Call{Target: target, Method: method, Conn: cc}), target)})
	}
	return b.circuit(key{kind: keyGRPC, b: target})
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TargetName returns the circuit name of an HTTP URL's scheme and host (url.URL's
// Scheme and Host): "scheme://host:port", lower case, with the scheme's default port
// when the host has none (80 for http and ws, 443 for https and wss), so that every
// spelling of one target shares its circuit. The scheme defaults to http. An IPv6
// literal keeps its brackets ("http://[::1]:8080"); a host that is not host[:port]
// (unbracketed colons) is kept whole, without a default port, so that the name of a
// name is itself.
func TargetName(scheme, host string) string {
	scheme = strings.ToLower(scheme)
	if scheme == "" {
		scheme = "http"
	}
	h, port := splitHostPort(host)
	h = strings.ToLower(h)
	if port == "" && (!strings.Contains(h, ":") || strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]")) {
		switch scheme {
		case "http", "ws":
			port = "80"
		case "https", "wss":
			port = "443"
		}
	}
	if port == "" {
		return scheme + "://" + h
	}
	return scheme + "://" + h + ":" + port
}

// splitHostPort splits a URL host into its host (brackets kept around an IPv6
// literal) and port; the port is empty when there is none, or when it is empty or
// not all digits (the host is then everything).
func splitHostPort(host string) (h, port string) {
	i := strings.LastIndexByte(host, ':')
	if i < 0 || strings.HasPrefix(host, "[") && !strings.HasSuffix(host[:i], "]") ||
		!strings.HasPrefix(host, "[") && strings.IndexByte(host, ':') != i {
		return host, ""
	}
	p := host[i+1:]
	if p == "" {
		return host[:i], ""
	}
	for j := 0; j < len(p); j++ {
		if p[j] < '0' || p[j] > '9' {
			return host, ""
		}
	}
	return host[:i], p
}
