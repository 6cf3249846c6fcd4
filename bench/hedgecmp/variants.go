package hedgecmp

import (
	"net/http"
	"time"

	"github.com/cristalhq/hedgedhttp"
	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"

	"github.com/deadlinekit/deadlinekit/hedge"
)

// Variant builds the client transport of one contender. p99 is the P99 measured
// without hedging, for the contenders that take a fixed delay.
type Variant struct {
	Name  string
	Build func(base http.RoundTripper, p99 time.Duration) (http.RoundTripper, string, error)
}

// Variants returns the contenders, in table order. The first, no hedging, measures
// the P99 the fixed-delay contenders use.
func Variants() []Variant {
	return []Variant{
		{"no hedging", func(base http.RoundTripper, _ time.Duration) (http.RoundTripper, string, error) {
			return base, "", nil
		}},
		{"deadlinekit/hedge", func(base http.RoundTripper, _ time.Duration) (http.RoundTripper, string, error) {
			return hedge.NewTransport(base), "defaults: P99 of a 30 s window after 100 samples, cap 15%", nil
		}},
		{"cristalhq/hedgedhttp v0.9.2", func(base http.RoundTripper, p99 time.Duration) (http.RoundTripper, string, error) {
			rt, err := hedgedhttp.NewRoundTripper(p99, 2, base)
			return rt, "fixed delay " + p99.Round(time.Millisecond/10).String() + ", upto 2", err
		}},
		{"failsafe-go v0.9.8 (fixed delay)", func(base http.RoundTripper, p99 time.Duration) (http.RoundTripper, string, error) {
			p := hedgepolicy.NewWithDelay[*http.Response](p99)
			return failsafehttp.NewRoundTripper(base, p), "hedgepolicy.NewWithDelay(" + p99.Round(time.Millisecond/10).String() + ")", nil
		}},
		{"failsafe-go v0.9.8 (quantile + budget)", func(base http.RoundTripper, _ time.Duration) (http.RoundTripper, string, error) {
			p := hedgepolicy.NewBuilderWithDelayQuantile[*http.Response](0.99, 1000, 100).
				WithBudget(budget.NewBuilder().WithMaxRate(0.15).Build()).Build()
			return failsafehttp.NewRoundTripper(base, p), "NewBuilderWithDelayQuantile(0.99, 1000, 100), budget max rate 0.15", nil
		}},
	}
}
