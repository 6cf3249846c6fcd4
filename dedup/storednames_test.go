package dedup_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/deadlinekit/deadlinekit/dedup"
)

// leaseLog is a Store that notes what each Acquire was given.
type leaseLog struct {
	dedup.Store
	keys   []string
	leases []dedup.Lease
}

func (l *leaseLog) Acquire(ctx context.Context, key string, lease dedup.Lease) (bool, dedup.Entry, error) {
	l.keys, l.leases = append(l.keys, key), append(l.leases, lease)
	return l.Store.Acquire(ctx, key, lease)
}

// TestStoredNames pins what a store is given and what a run derives: the key in
// its scope, the fingerprint, the token and the derived keys. A shared Redis holds
// records written by other versions of the middleware, and a downstream holds
// answers under keys derived by them: none of these may change.
func TestStoredNames(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []dedup.Option
		scoped string
	}{
		{"no scope", nil, "0::k-1"},
		{"scope", []dedup.Option{dedup.WithScope(func(context.Context) string { return "acme" })}, "4:acme:k-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &leaseLog{Store: dedup.NewMemoryStore()}
			var derived []string
			h := dedup.NewMiddleware(log, tc.opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				derived = append(derived, dedup.DerivedKey(r.Context(), "charge"))
				dedup.Forget(r.Context()) // the second request runs again
			}))
			for range 2 {
				r := httptest.NewRequest(http.MethodPost, "/charges?c=1", strings.NewReader(`{"amount":100}`))
				r.Header.Set("Idempotency-Key", "k-1")
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
			if len(log.keys) != 2 || len(derived) != 2 {
				t.Fatalf("%d acquires, %d runs; want 2 of each", len(log.keys), len(derived))
			}
			fp := sha256.Sum256([]byte("POST\x00/charges?c=1\x00" + `{"amount":100}`))
			seed := sha256.Sum256([]byte("deadlinekit/keychain/v1\x00" + tc.scoped))
			label := sha256.Sum256(append(append(seed[:], '@'), "charge"...))
			wantDerived := "dk1." + base64.RawURLEncoding.EncodeToString(label[:])
			token := regexp.MustCompile(`^[0-9a-f]{32}$`)
			for i, l := range log.leases {
				if log.keys[i] != tc.scoped {
					t.Errorf("store key %q, want %q", log.keys[i], tc.scoped)
				}
				if l.Fingerprint != hex.EncodeToString(fp[:]) {
					t.Errorf("fingerprint %q, want %x", l.Fingerprint, fp)
				}
				if !token.MatchString(l.Token) {
					t.Errorf("token %q: not 128 bits in hex", l.Token)
				}
				if derived[i] != wantDerived {
					t.Errorf("derived key %q, want %q", derived[i], wantDerived)
				}
			}
			if log.leases[0].Token == log.leases[1].Token {
				t.Errorf("two runs share the token %q", log.leases[0].Token)
			}
		})
	}
}
