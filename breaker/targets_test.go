package breaker_test

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deadlinekit/deadlinekit/breaker"
)

// manyHosts answers 200 for every host but dead.test, which answers 502.
type manyHosts struct{}

func (manyHosts) RoundTrip(r *http.Request) (*http.Response, error) {
	code := http.StatusOK
	if r.URL.Host == "dead.test" {
		code = http.StatusBadGateway
	}
	return &http.Response{StatusCode: code, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

// A long-lived client meets more targets over its life than MaxTargets (an HTTP
// client's hosts, a gRPC target's endpoints as its replicas are replaced): the
// circuits of targets it no longer calls, closed and with nothing left in their
// windows, make room for new ones, which are broken as the first were. Circuits
// in use are kept, and a target beyond them still goes unbroken.
func TestIdleCircuitsMakeRoomForNewTargets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New()
		client := &http.Client{Transport: b.Transport(manyHosts{})}
		get := func(host string) error {
			resp, err := client.Get("http://" + host + "/")
			if err == nil {
				resp.Body.Close()
			}
			return err
		}
		for i := range breaker.MaxTargets {
			if err := get("h" + strconv.Itoa(i) + ".test"); err != nil {
				t.Fatal(err)
			}
		}
		if err := get("late.test"); err != nil || b.Stats().Untracked != 1 {
			t.Fatalf("a target beyond %d in use: %v, %+v; want it sent unbroken", breaker.MaxTargets, err, b.Stats())
		}

		<-time.After(time.Hour) // the first targets are not called again
		for i := range breaker.DefaultConsecutiveFailures {
			if err := get("dead.test"); err != nil {
				t.Fatalf("call %d: %v", i+1, err)
			}
		}
		if err := get("dead.test"); !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("after %d failures of a new target, an hour after the last call to the %d others: %v, want the circuit open (%+v)",
				breaker.DefaultConsecutiveFailures, breaker.MaxTargets, err, b.Stats())
		}
		if s := b.Stats(); s.Targets > breaker.MaxTargets {
			t.Fatalf("%d circuits, more than %d", s.Targets, breaker.MaxTargets)
		}
	})
}
