package breaker_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/breaker"
	"github.com/deadlinekit/deadlinekit/internal/pushback"
)

func TestTargetName(t *testing.T) {
	for _, c := range []struct{ scheme, host, want string }{
		{"http", "example.com", "http://example.com:80"},
		{"https", "example.com", "https://example.com:443"},
		{"HTTPS", "Example.COM:443", "https://example.com:443"},
		{"https", "example.com:8443", "https://example.com:8443"},
		{"", "example.com", "http://example.com:80"},
		{"wss", "example.com", "wss://example.com:443"},
		{"ftp", "example.com", "ftp://example.com"},
		{"http", "127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"http", "[::1]:8080", "http://[::1]:8080"},
		{"http", "[::1]", "http://[::1]:80"},
		{"http", "[fe80::1%25en0]:80", "http://[fe80::1%25en0]:80"},
		// Hostile: url.URL's Host as a RoundTripper may be handed it.
		{"http", "", "http://:80"},
		{"http", "example.com:", "http://example.com:80"},
		{"http", ":8080", "http://:8080"},
		{"http", "::1", "http://::1"},             // unbracketed IPv6: all host
		{"http", "a:b:c", "http://a:b:c"},         // several colons, no brackets
		{"http", "host:port", "http://host:port"}, // a port that is not digits is part of the host
		{"http", "[::1]x:80", "http://[::1]x:80"},
		{"http", "[::1", "http://[::1"},
		{"http", "exa mple:80", "http://exa mple:80"},
	} {
		if got := breaker.TargetName(c.scheme, c.host); got != c.want {
			t.Errorf("TargetName(%q, %q) = %q, want %q", c.scheme, c.host, got, c.want)
		}
	}
}

// FuzzTargetName: any scheme and host give a name without panicking, and a name is
// its own name (every spelling of a target has one circuit).
func FuzzTargetName(f *testing.F) {
	for _, s := range []string{"example.com", "example.com:443", "[::1]:80", "[::1", ":", "a:b", "", "[]:", "x:00080"} {
		f.Add("https", s)
	}
	f.Fuzz(func(t *testing.T, scheme, host string) {
		if strings.Contains(scheme, "://") || strings.ContainsAny(scheme, ":") {
			return // not a URL scheme: outside the property's domain
		}
		n := breaker.TargetName(scheme, host)
		s, h, ok := strings.Cut(n, "://")
		if !ok {
			t.Fatalf("TargetName(%q, %q) = %q: no ://", scheme, host, n)
		}
		if again := breaker.TargetName(s, h); again != n {
			t.Fatalf("TargetName(%q, %q) = %q, but its own name is %q", scheme, host, n, again)
		}
	})
}

func TestOpenError(t *testing.T) {
	e := &breaker.OpenError{Target: "dns:///svc:50051", State: breaker.Open, RetryAfter: 1500*time.Millisecond + time.Microsecond}
	if !errors.Is(e, breaker.ErrOpen) {
		t.Fatal("OpenError does not match ErrOpen")
	}
	if got := e.PushbackMs(); got != "1501" {
		t.Fatalf("PushbackMs = %q, want 1501 (rounded up)", got)
	}
	if got, want := e.Error(), "dns:///svc:50051: circuit open, next probe in 1.5s (call not sent)"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if status.Code(e) != codes.Unavailable {
		t.Fatalf("code = %v", status.Code(e))
	}
	if (&breaker.OpenError{RetryAfter: -time.Second}).PushbackMs() != "0" {
		t.Fatal("a negative RetryAfter gives a negative pushback: do not retry")
	}
	if _, ok := pushback.Of(e); ok {
		t.Fatal("a bare OpenError carries no pushback")
	}
}
