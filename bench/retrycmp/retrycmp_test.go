package retrycmp_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/deadlinekit/deadlinekit/bench/retrycmp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestHarness runs every variant briefly: the chain works on loopback, the bottom
// counts the calls of each user request, and the figures that do not depend on timing
// hold. The figures themselves come from cmd/retrybench, not from here.
func TestHarness(t *testing.T) {
	cfg := retrycmp.SustainedConfig{Warmup: 40, Outage: 40, Rate: 200, Deadline: 500 * time.Millisecond}
	for _, v := range retrycmp.Variants() {
		if !v.SustainedOnly {
			r, err := retrycmp.RunOutage(v, 2, cfg.Deadline)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %.1f calls reach the bottom per request (%d–%d); time to fail p50 %v max %v; %s",
				v.Name, r.PerRequest(), r.MinCalls, r.MaxCalls, r.P50, r.Max, retrycmp.FormatCodes(r.Codes))
			if r.Codes[codes.OK] != 0 || r.MinCalls < 1 {
				t.Errorf("%s: %+v", v.Name, r)
			}
			if v.Name == "deadlinekit/retry" && r.MaxCalls > retrycmp.Attempts {
				t.Errorf("%s: %d calls for one request; want ≤ %d", v.Name, r.MaxCalls, retrycmp.Attempts)
			}
		}
		s, err := retrycmp.RunSustained(v, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s, sustained: %d retries reached the bottom for %d outage requests (bound %d); %s",
			v.Name, s.Retries(), s.Outage, s.Bound, retrycmp.FormatCodes(s.Codes))
		if s.WarmupErrors != 0 || s.OutageOK != 0 || s.Reached == 0 {
			t.Errorf("%s: %+v", v.Name, s)
		}
		if s.Bound >= 0 && s.Retries() > s.Bound {
			t.Errorf("%s: %d retries; want ≤ %d", v.Name, s.Retries(), s.Bound)
		}
	}
}
